#!/usr/bin/env bash
# N idle launchers on this machine (default 100): each runs one VM against the VMM double (or
# CLOUD_HYPERVISOR_BIN), all Running, then nothing happens for IDLE seconds. Reports the
# launchers' total CPU time over that window (as % of one core), their total and per-launcher
# RSS (and PSS, which counts shared library pages once), and the VMMs' separately.
# Usage: bench/launcher/idle_launchers.sh [BUILD_DIR] [N] [IDLE_SECONDS]
# Prints RESULT lines for bench/run.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-100}
IDLE=${3:-10}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
W=$(mktemp -d /tmp/chl-idle-XXXXXX)
pids=()
cleanup() {
  for i in $(seq 1 "$N"); do "$CHL" kill --no-wait --state-dir "$W/s$i" >/dev/null 2>&1 || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/kernel" && cp "$BUILD/guests/pvh-guest.elf" "$W/kernel/guest.elf"
for i in $(seq 1 "$N"); do
  sed -e "s/name: pvh-demo/name: idle$i/" "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/vmi$i.yaml"
  "$CHL" run --vmi "$W/vmi$i.yaml" --state-dir "$W/s$i" --vmm-binary "$VMM" \
    --volume "kernel-boot=$W/kernel" --log-file "$W/l$i.log" --log-level warn &
  pids+=($!)
done
running=0
for _ in $(seq 1 600); do
  running=0
  for i in $(seq 1 "$N"); do
    [ -S "$W/s$i/launcher.sock" ] && running=$((running + 1))
  done
  [ "$running" -eq "$N" ] && break
  sleep 0.2
done
for i in $(seq 1 "$N"); do
  "$CHL" status --state-dir "$W/s$i" --json 2>/dev/null | grep -q '"state":"Running"' || { echo "idle$i not Running" >&2; exit 1; }
done
vmm_pids=$(for p in "${pids[@]}"; do pgrep -P "$p" || true; done)
ticks() {  # total utime+stime (clock ticks) of the given pids
  local t=0
  for p in "$@"; do
    [ -r "/proc/$p/stat" ] || continue
    t=$((t + $(awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$p/stat")))
  done
  echo "$t"
}
mem() {  # mem FIELD pids... : sum of a smaps_rollup field in KiB
  local f=$1 t=0
  shift
  for p in "$@"; do
    [ -r "/proc/$p/smaps_rollup" ] || continue
    t=$((t + $(awk -v f="$f:" '$1 == f {print $2}' "/proc/$p/smaps_rollup")))
  done
  echo "$t"
}
sleep 1
l0=$(ticks "${pids[@]}"); v0=$(ticks $vmm_pids)
sleep "$IDLE"
l1=$(ticks "${pids[@]}"); v1=$(ticks $vmm_pids)
hz=$(getconf CLK_TCK)
lrss=$(mem Rss "${pids[@]}"); lpss=$(mem Pss "${pids[@]}")
vrss=$(mem Rss $vmm_pids)
awk -v n="$N" -v idle="$IDLE" -v hz="$hz" -v l="$((l1 - l0))" -v v="$((v1 - v0))" \
    -v lrss="$lrss" -v lpss="$lpss" -v vrss="$vrss" -v vmm="$VMM" 'BEGIN {
  lcpu = l / hz / idle * 100; vcpu = v / hz / idle * 100
  printf "%d idle launchers (VMM: %s), %d s window, %d cores\n", n, vmm, idle, 0
  printf "launchers CPU: %.2f%% of one core in all (%d ticks); VMMs: %.2f%%\n", lcpu, l, vcpu
  printf "launchers RSS: %.1f MiB in all, %.2f MiB each; PSS %.1f MiB in all, %.2f MiB each\n", lrss/1024, lrss/1024/n, lpss/1024, lpss/1024/n
  printf "VMMs RSS: %.1f MiB in all\n", vrss/1024
  printf "RESULT\tidle_cpu\t%d idle launchers: CPU (%% of one core)\t%.2f\t\t\t%%\tabs_le\t1\n", n, lcpu
  printf "RESULT\tidle_pss\t%d idle launchers: memory each (PSS)\t%.2f\t\t\tMiB\tabs_le\t8\n", n, lpss/1024/n
}' | sed "s/, 0 cores/, $(nproc) cores/"
