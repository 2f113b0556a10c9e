#!/usr/bin/env bash
# The test command: install dependencies, configure, build, run every test.
# CLOUD_HYPERVISOR_BIN=/path/to/cloud-hypervisor runs the Cloud Hypervisor tests against a real
# VMM instead of the project's VMM double (lane real-ch; its guest is the project's PVH guest
# unless CHL_TEST_GUEST_KERNEL names another; the lane ends with how many tests ran against the
# real VMM and why the others skipped).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCHL_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHL_DEBUG_INFO=OFF
cmake --build "$BUILD_DIR" -j "$JOBS"

# The real Cloud Hypervisor, when there is one: CLOUD_HYPERVISOR_BIN, else cloud-hypervisor on PATH,
# else ../shared/bin/cloud-hypervisor beside the project's root (CI clones the repository with
# shared/ beside it; ../shared/bin/README.md).
REAL_CH=${CLOUD_HYPERVISOR_BIN:-}
if [ -z "$REAL_CH" ] && command -v cloud-hypervisor >/dev/null 2>&1; then
  REAL_CH=$(command -v cloud-hypervisor)
fi
if [ -z "$REAL_CH" ] && [ -x "$PWD/../shared/bin/cloud-hypervisor" ]; then
  REAL_CH=$(cd "$PWD/../shared/bin" && pwd)/cloud-hypervisor
fi

# CI lanes, in order (ctest labels set in tests/CMakeLists.txt). LANES="unit vmm" runs a subset.
ALL_LANES="unit vmm qemu image real-ch fuzz"
LANES=${LANES:-$ALL_LANES}
# Lane fuzz: each libFuzzer target for FUZZ_SECONDS (scripts/fuzz.sh, clang, own build dir).
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
ROOT=$PWD
cd "$BUILD_DIR"
failed=()
run_lane() {  # run_lane NAME CTEST-ARGS...
  local name=$1
  shift
  echo "=== lane $name ==="
  local start=$SECONDS
  if ctest --output-on-failure -j "$JOBS" --timeout 300 --no-tests=ignore "$@" </dev/null; then
    echo "=== lane $name: passed in $((SECONDS - start)) s ==="
  else
    echo "=== lane $name: FAILED after $((SECONDS - start)) s ==="
    failed+=("$name")
    failure_digest "$name" >>"$DIGEST"
  fi
}
# failure_digest LANE: each failed test of the lane's ctest run and its first failed assertions,
# kept for the end of the output (a CI log is often read from its tail).
DIGEST=$(mktemp)
trap 'rm -f "$DIGEST"' EXIT
failure_digest() {
  local log=Testing/Temporary/LastTest.log
  [ -f "$log" ] || return 0
  awk -v lane="$1" '
    /^[0-9]+\/[0-9]+ Testing: / { name = $0; sub(/^[0-9]+\/[0-9]+ Testing: /, "", name); n = 0; delete why; next }
    name != "" && n < 4 && /(ERROR|FATAL ERROR|values:|Timeout|exception|Sanitizer)/ { why[n++] = substr($0, 1, 400) }
    /^Test (Passed|Failed)/ && name != "" {
      if ($0 ~ /^Test Failed/ || $0 ~ /Timeout/) {
        printf "  [%s] %s\n", lane, name
        for (i = 0; i < n; i++) printf "      %s\n", why[i]
      }
      name = ""
    }' "$log"
}
# real_vmm_summary VMM: after a ctest run against a real VMM, how many of its tests ran against it
# and how many skipped, with each skip reason and how many tests gave it (a test printing
# "SKIPPED: <reason>" skipped as a whole; "SKIPPED PART: <reason>" ran but dropped a part: counted
# as run, its reasons listed too). Read from ctest's log of the run.
real_vmm_summary() {
  local log=Testing/Temporary/LastTest.log version
  [ -f "$log" ] || return 0
  version=$("$1" --version 2>/dev/null | head -n 1 || true)
  awk -v vmm="$1" -v version="${version:-version unknown}" '
    /^[0-9]+\/[0-9]+ Testing: / { name = $0; sub(/^[0-9]+\/[0-9]+ Testing: /, "", name); total++; why = ""; haspart = 0; delete seen; next }
    /^SKIPPED: / && name != "" && why == "" { why = substr($0, 10) }
    /^SKIPPED PART: / && name != "" { part = substr($0, 15); haspart = 1; if (!(part in seen)) { seen[part] = 1; parts[part]++ } }
    /^Test (Passed|Failed|Not Run)/ && name != "" {
      if ($0 ~ /^Test Not Run/) notrun++
      else if (why != "") { skipped++; reasons[why]++ }
      else { ran++; if (haspart) np++; if ($0 ~ /^Test Failed/) failed++ }
      name = ""
    }
    END {
      printf "=== lane real-ch: %d of %d tests ran against the real VMM (%s: %s), %d of them failed; %d skipped", ran, total, vmm, version, failed, skipped
      if (notrun) printf ", %d not run", notrun
      if (np) printf "; %d of those ran with a part skipped", np
      printf "\n"
      for (r in reasons) printf "      %3d skipped: %s\n", reasons[r], r
      for (r in parts) printf "      %3d skipped a part: %s\n", parts[r], r
    }' "$log"
}

for lane in $LANES; do
  case $lane in
    unit) run_lane unit -L '^unit$' ;;
    # Cloud Hypervisor integration and end to end against the project's VMM double (not CH).
    # With them, label double: tests of the double's own knobs (never run against the real CH).
    vmm) CLOUD_HYPERVISOR_BIN='' run_lane "vmm (VMM double)" -L '^(vmm|double)$' ;;
    qemu) run_lane "qemu (real QEMU and libvirt, project test guests)" -L '^qemu$' ;;
    image)
      # The container image built from the Dockerfile (scripts/image.sh: an mmdebstrap base, no
      # registry) and run as KubeVirt's pod (tests/image). Starts a Docker engine when none
      # answers (installing Debian's docker.io when there is no dockerd) and stops only that one.
      # The image carries the real Cloud Hypervisor when there is one (the one found above, else
      # ../shared/bin/cloud-hypervisor: scripts/image.sh), and its pod boots the PVH guest on it.
      echo "=== lane image (the container image, built by docker and run as KubeVirt's pod) ==="
      start=$SECONDS
      if bash "$ROOT/scripts/docker-engine.sh" start </dev/null; then
        if CLOUD_HYPERVISOR_BIN=$REAL_CH CHL_IMAGE_OUT="$PWD/image" bash "$ROOT/scripts/image.sh" </dev/null; then
          CHL_IMAGE=${CHL_IMAGE:-ch-launcher:dev} run_lane image -L '^image$'
        else
          echo "=== lane image: FAILED after $((SECONDS - start)) s (the image did not build) ==="
          failed+=(image)
        fi
        bash "$ROOT/scripts/docker-engine.sh" stop </dev/null || true
      else
        echo "=== lane image: FAILED: no Docker engine could be started (above) ==="
        failed+=(image)
      fi
      ;;
    real-ch)
      if [ -n "$REAL_CH" ]; then
        # The boot tests' guest: the project's PVH guest (it powers off on CH's ACPI power button).
        # Not the double's own tests (label double beside vmm: its knobs, no CH behind them).
        CHL_TEST_GUEST_KERNEL=${CHL_TEST_GUEST_KERNEL:-$PWD/guests/pvh-guest.elf} \
          CLOUD_HYPERVISOR_BIN=$REAL_CH run_lane "real-ch ($REAL_CH)" -L '^vmm$' -LE '^double$'
        real_vmm_summary "$REAL_CH"
      else
        echo "=== lane real-ch: SKIPPED: no cloud-hypervisor binary (none on PATH, CLOUD_HYPERVISOR_BIN unset); the same tests ran against the VMM double in lane vmm ==="
      fi
      ;;
    fuzz)
      echo "=== lane fuzz (5 libFuzzer targets, ${FUZZ_SECONDS} s each) ==="
      start=$SECONDS
      rc=0
      BUILD_DIR=${FUZZ_BUILD_DIR:-$ROOT/build-fuzz} JOBS=$JOBS bash "$ROOT/scripts/fuzz.sh" "$FUZZ_SECONDS" </dev/null || rc=$?
      if [ "$rc" -eq 0 ]; then
        echo "=== lane fuzz: passed in $((SECONDS - start)) s ==="
      elif [ "$rc" -eq 77 ]; then
        echo "=== lane fuzz: SKIPPED (reason above: clang/libFuzzer unavailable) ==="
      else
        echo "=== lane fuzz: FAILED after $((SECONDS - start)) s ==="
        failed+=(fuzz)
      fi
      ;;
    *) echo "test: unknown lane '$lane' (lanes: $ALL_LANES)" >&2; exit 2 ;;
  esac
done
# Anything without a lane label still runs (a test must never silently fall out of CI).
if [ "$LANES" = "$ALL_LANES" ] && ! ctest -N -LE '^(unit|vmm|double|qemu|image)$' | grep -q 'Total Tests: 0'; then
  run_lane unlabelled -LE '^(unit|vmm|double|qemu|image)$'
fi

if [ ${#failed[@]} -ne 0 ]; then
  if [ -s "$DIGEST" ]; then
    echo "=== the tests that failed, and their first failed assertions ==="
    cat "$DIGEST"
  fi
  echo "test: FAILED lanes: ${failed[*]}"
  exit 1
fi
echo "test: all lanes passed"
