#!/usr/bin/env bash
# Launcher figures (issue 4), against the VMM double or a real cloud-hypervisor
# (CLOUD_HYPERVISOR_BIN), with the PVH test guest:
#   - launch overhead: `ch-launcher run` start -> Running (seen on the command socket), minus the
#     same create+boot done with bare curl calls against the same VMM; median of N runs;
#   - launcher RSS with the VM running (steady state);
#   - idle wake-ups: context switches of all launcher threads over 10 s with nothing happening.
# Usage: bench/launcher/bench_launcher.sh [BUILD_DIR] [N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-20}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
GUEST=$BUILD/guests/pvh-guest.elf
W=$(mktemp -d /tmp/chl-bench-XXXXXX)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$W"' EXIT
mkdir -p "$W/kernel" && cp "$GUEST" "$W/kernel/guest.elf"
sed -e 's/name: pvh-demo/name: bench/' "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/vmi.yaml"
now_us() { echo $(( $(date +%s%N) / 1000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# The same vm.create body the launcher sends.
"$CHL" render --vmi "$W/vmi.yaml" --volume "kernel-boot=$W/kernel" --state-dir "$W/state" > "$W/create.json"

bare=()
for i in $(seq 1 "$N"); do
  rm -f "$W/api.sock"
  t0=$(now_us)
  "$VMM" --api-socket "path=$W/api.sock" > /dev/null 2>&1 &
  pid=$!
  while [ ! -S "$W/api.sock" ]; do sleep 0.001; done
  curl -s --unix-socket "$W/api.sock" -X PUT -H 'Content-Type: application/json' \
    --data-binary @"$W/create.json" http://localhost/api/v1/vm.create > /dev/null
  curl -s --unix-socket "$W/api.sock" -X PUT http://localhost/api/v1/vm.boot > /dev/null
  t1=$(now_us)
  bare+=($((t1 - t0)))
  curl -s --unix-socket "$W/api.sock" -X PUT http://localhost/api/v1/vmm.shutdown > /dev/null || true
  wait "$pid" 2>/dev/null || true
done

ours=()
for i in $(seq 1 "$N"); do
  rm -rf "$W/state"
  t0=$(now_us)
  "$CHL" run --vmi "$W/vmi.yaml" --state-dir "$W/state" --vmm-binary "$VMM" \
    --volume "kernel-boot=$W/kernel" --log-level info 2> "$W/run.log" &
  lp=$!
  until "$CHL" status --state-dir "$W/state" --json 2>/dev/null | grep -q '"state":"Running"'; do sleep 0.001; done
  # The moment the launcher knew the VM runs: its own log line's timestamp (microseconds), not
  # when the status poll above noticed (a poll is a process start, several ms on a busy machine,
  # which the bare path below does not pay).
  ts=$(grep -m1 '"msg":"domain event Started' "$W/run.log" | sed 's/.*"timestamp":"\([^"]*\)".*/\1/')
  t1=$(date -d "$ts" +%s%6N)
  ours+=($((t1 - t0)))
  if [ "$i" -eq "$N" ]; then
    sleep 2
    rss=$(awk '/VmRSS/ {print $2}' /proc/$lp/status)
    cs0=$(cat /proc/$lp/task/*/status | awk '/ctxt_switches/ {s+=$2} END {print s}')
    sleep 10
    cs1=$(cat /proc/$lp/task/*/status | awk '/ctxt_switches/ {s+=$2} END {print s}')
    threads=$(ls /proc/$lp/task | wc -l)
  fi
  "$CHL" kill --state-dir "$W/state" > /dev/null
  wait "$lp" 2>/dev/null || true
done

b=$(printf '%s\n' "${bare[@]}" | median)
o=$(printf '%s\n' "${ours[@]}" | median)
echo "VMM: $VMM"
awk -v b="$b" -v o="$o" -v n="$N" 'BEGIN {
  printf "bare curl create+boot (VMM start included), median of %d: %.1f ms\n", n, b / 1000
  printf "ch-launcher run -> Running (VMM start, state dir, checks; to the Running line of the launcher log), median of %d: %.1f ms\n", n, o / 1000
  printf "launch overhead (median difference): %.1f ms\n", (o - b) / 1000 }'
awk -v r="$rss" -v t="$threads" 'BEGIN { printf "launcher RSS with a running VM: %.1f MiB (%d threads)\n", r / 1024, t }'
echo "launcher context switches in 10 s idle: $((cs1 - cs0))"
# For bench/run.sh: key, what, ours, peer name, peer, unit, target kind, target.
awk -v b="$b" -v o="$o" -v r="$rss" -v cs="$((cs1 - cs0))" 'BEGIN {
  printf "RESULT\tlaunch\trun -> Running (median)\t%.1f\tbare curl create+boot\t%.1f\tms\tdiff_le\t5\n", o / 1000, b / 1000
  printf "RESULT\trss\tlauncher RSS, VM running\t%.1f\t\t\tMiB\tabs_le\t8\n", r / 1024
  printf "RESULT\tidle_wakeups\tlauncher wake-ups per second, idle\t%.1f\t\t\t/s\tabs_le\t0\n", cs / 10 }'
