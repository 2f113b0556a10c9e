#!/usr/bin/env bash
# The launcher bundle's figures (issue 38), as RESULT lines for bench/run.sh: its size (files,
# MiB) as the init container copies it into the pod, and the start (docker run) -> Running of one
# VM from the bundle in a foreign (busybox-only) root filesystem beside the same VM from our own
# image, one run each, from the image lane's own flow (tests/image/test_bundle.cpp, its MESSAGE
# lines). The load at the time is in results.md's heading.
# Usage: bench/image/bench_bundle.sh BUILD_DIR   (CHL_IMAGE: the image, scripts/image.sh; or
#        CHL_BUNDLE_DIR: a bundle from scripts/bundle.sh, then without our image's figure). Root.
set -euo pipefail
BUILD=$(cd "${1:?usage: bench_bundle.sh BUILD_DIR}" && pwd)
export CHL_IMAGE=${CHL_IMAGE:-ch-launcher:dev}
result() { printf 'RESULT\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@"; }
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
out=$("$BUILD/tests/image/test_bundle" --success 2>&1 || true)
echo "$out" | grep -E 'bundle size|start to Running|SKIPPED' || true
files=$(echo "$out" | sed -n 's/.*bundle size: \([0-9]*\) files, \([0-9]*\) KiB.*/\1/p' | head -n 1)
kib=$(echo "$out" | sed -n 's/.*bundle size: \([0-9]*\) files, \([0-9]*\) KiB.*/\2/p' | head -n 1)
bundle_ms=$(echo "$out" | sed -n 's/.*start to Running, bundle in the foreign root: \([0-9]*\) ms.*/\1/p' | head -n 1)
ours_ms=$(echo "$out" | sed -n 's/.*start to Running, our own image: \([0-9]*\) ms.*/\1/p' | head -n 1)
if [ -n "$files" ]; then
  result bundle_files "launcher bundle: files (launcher, modules, virt-probe, CH, firmware, libraries, loader)" "$files" "" "" files info ""
  result bundle_size "launcher bundle: size as copied into the pod volume" "$(echo "scale=1; $kib / 1024" | bc)" "" "" MiB info ""
fi
if [ -n "$bundle_ms" ]; then
  result bundle_start_running "start -> Running, bundle in a busybox-only root filesystem (one run)" \
    "$(printf %.2f "$(echo "scale=3; $bundle_ms / 1000" | bc)")" "our own image" \
    "$( [ -n "$ours_ms" ] && printf %.2f "$(echo "scale=3; $ours_ms / 1000" | bc)")" s faster_ge 0.9
else
  echo "bench_bundle: the bundle's flow printed no figure (test output follows)" >&2
  echo "$out" | tail -n 30 >&2
fi
