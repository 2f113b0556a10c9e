#!/usr/bin/env bash
# Launcher figures (issue 4), against the VMM double or a real cloud-hypervisor
# (CLOUD_HYPERVISOR_BIN; bench/run.sh gives it the real CH when there is one), with the PVH test guest:
#   - launch overhead: `ch-launcher run` start -> Running, minus the floor: the same VMM started
#     by hand with --api-socket and the same vm.create + vm.boot sent by curl; median of N runs.
#     Both end at the same point, the VMM saying the VM runs: CH's "vm booted" event, which is
#     the launcher's Running (its log line's timestamp) and which CH emits just before it answers
#     the floor's vm.boot (CH v52.0 vmm/src/lib.rs:1887, Vmm::vm_boot). Both include the VMM's start;
#   - console: the same two, each until the guest's first console output ("hello from COM1";
#     the double's pretend banner) is read from the serial PTY (ours: in virt-serial0-log, which
#     the launcher's bridge writes from the PTY; the floor: read from the PTY vm.info names). CH
#     holds a PTY's output until it sees the other end open, which it checks when its serial
#     thread's 500 ms epoll_wait times out (v52.0 vmm/src/serial_manager.rs:272, :300-306), so
#     both pay up to ~1 s there: CH's, not the launcher's;
#   - launcher RSS with the VM running (steady state);
#   - idle wake-ups: context switches of all launcher threads over 10 s with nothing happening;
#   - the floor of a mass start (bench/kubevirt/bench_mass_start's rows): M bare VMMs started at
#     once, each created and booted by curl: the time to the last vm.boot answered, and the
#     VMMs' PSS summed with every VM running (M = 0 skips it).
# Every vm.create / vm.boot of the floor must succeed (a failed one ends the bench).
# Usage: bench/launcher/bench_launcher.sh [BUILD_DIR] [N] [M]   (M: 20)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-20}
M=${3:-20}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
GUEST=$BUILD/guests/pvh-guest.elf
W=$(mktemp -d /tmp/chl-bench-XXXXXX)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$W"' EXIT
mkdir -p "$W/kernel" && cp "$GUEST" "$W/kernel/guest.elf"
sed -e 's/name: pvh-demo/name: bench/' "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/vmi.yaml"
now_us() { echo $(( $(date +%s%N) / 1000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# The same vm.create body the launcher sends (serial on a PTY), with the guest agent's vsock
# socket outside the launcher's state dir.
"$CHL" render --vmi "$W/vmi.yaml" --volume "kernel-boot=$W/kernel" --state-dir "$W/state" |
  sed -e "s|$W/state/|$W/bare-|" > "$W/create.json"
grep -q '"mode": "Pty"' "$W/create.json" || { echo "bench: the rendered vm.create body has no serial PTY" >&2; exit 1; }
first_output() { grep -qs -e 'hello from COM1' -e 'pretend guest: booted' "$1"; }

bare=()
bare_console=()
for i in $(seq 1 "$N"); do
  rm -f "$W/api.sock" "$W"/bare-*.vsock
  t0=$(now_us)
  "$VMM" --api-socket "path=$W/api.sock" > "$W/bare-vmm.log" 2>&1 &
  pid=$!
  while [ ! -S "$W/api.sock" ]; do sleep 0.001; done
  if ! curl -sSf --unix-socket "$W/api.sock" -X PUT -H 'Content-Type: application/json' \
      --data-binary @"$W/create.json" http://localhost/api/v1/vm.create > /dev/null ||
     ! curl -sSf --unix-socket "$W/api.sock" -X PUT http://localhost/api/v1/vm.boot > /dev/null; then
    echo "bench: the floor's vm.create/vm.boot failed on $VMM:" >&2
    cat "$W/bare-vmm.log" >&2
    exit 1
  fi
  t1=$(now_us)
  pty=$(curl -s --unix-socket "$W/api.sock" http://localhost/api/v1/vm.info |
    grep -o '"serial":{[^}]*}' | grep -o '/dev/pts/[0-9]*' | head -n 1)
  [ -n "$pty" ] || { echo "bench: vm.info names no serial PTY" >&2; exit 1; }
  timeout 20 grep -a -m 1 -q -e 'hello from COM1' -e 'pretend guest: booted' < "$pty" ||
    { echo "bench: no console output on $pty within 20 s" >&2; exit 1; }
  t2=$(now_us)
  bare+=($((t1 - t0)))
  bare_console+=($((t2 - t0)))
  curl -s --unix-socket "$W/api.sock" -X PUT http://localhost/api/v1/vmm.shutdown > /dev/null || true
  wait "$pid" 2>/dev/null || true
done

ours=()
ours_console=()
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
  until first_output "$W/state/virt-serial0-log"; do sleep 0.001; done
  ours_console+=($(($(now_us) - t0)))
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

# The mass-start floor: M bare VMMs, each with its own API socket and serial file (bodies made
# before the clock starts), started at once; each subshell creates and boots its VM by curl.
mass_ms=""
mass_pss=""
if [ "$M" -gt 0 ]; then
  for i in $(seq 1 "$M"); do
    sed -e "s|$W/bare-|$W/mass-$i-|" "$W/create.json" > "$W/mass-$i.json"
  done
  subs=()
  t0=$(now_us)
  for i in $(seq 1 "$M"); do
    (
      "$VMM" --api-socket "path=$W/mass-$i.sock" > "$W/mass-$i.log" 2>&1 &
      echo $! > "$W/mass-$i.pid"
      while [ ! -S "$W/mass-$i.sock" ]; do sleep 0.001; done
      curl -sSf --unix-socket "$W/mass-$i.sock" -X PUT -H 'Content-Type: application/json' \
        --data-binary @"$W/mass-$i.json" http://localhost/api/v1/vm.create > /dev/null &&
        curl -sSf --unix-socket "$W/mass-$i.sock" -X PUT http://localhost/api/v1/vm.boot > /dev/null
    ) &
    subs+=($!)
  done
  mass_failed=0
  for p in "${subs[@]}"; do wait "$p" || mass_failed=$((mass_failed + 1)); done
  t1=$(now_us)
  mass_ms=$(( (t1 - t0) / 1000 ))
  sleep 2
  mass_pss=0
  for i in $(seq 1 "$M"); do
    mass_pss=$((mass_pss + $(awk '/^Pss:/ {print $2}' "/proc/$(cat "$W/mass-$i.pid")/smaps_rollup" 2>/dev/null || echo 0)))
  done
  for i in $(seq 1 "$M"); do
    curl -s --unix-socket "$W/mass-$i.sock" -X PUT http://localhost/api/v1/vmm.shutdown > /dev/null || true
  done
  for i in $(seq 1 "$M"); do
    while kill -0 "$(cat "$W/mass-$i.pid")" 2>/dev/null; do sleep 0.01; done
  done
  if [ "$mass_failed" -gt 0 ]; then
    echo "bench: $mass_failed of the $M bare vm.create/vm.boot failed on $VMM:" >&2
    cat "$W"/mass-*.log >&2
    exit 1
  fi
  echo "bare floor, $M VMMs started at once: last vm.boot answered after $mass_ms ms; their PSS summed: $((mass_pss / 1024)) MiB"
fi

b=$(printf '%s\n' "${bare[@]}" | median)
o=$(printf '%s\n' "${ours[@]}" | median)
bc_=$(printf '%s\n' "${bare_console[@]}" | median)
oc=$(printf '%s\n' "${ours_console[@]}" | median)
version=$("$VMM" --version 2>/dev/null | head -n 1 || true)
echo "VMM: $VMM ($version)"
# Each row names the VMM it ran on.
case $version in
  *double*) on="VMM double" ;;
  cloud-hypervisor*) on="real CH ${version#cloud-hypervisor }" ;;
  *) on="$VMM" ;;
esac
awk -v b="$b" -v o="$o" -v bc="$bc_" -v oc="$oc" -v n="$N" 'BEGIN {
  printf "bare curl create+boot (VMM start included, to vm.boot answered), median of %d: %.1f ms\n", n, b / 1000
  printf "ch-launcher run -> Running (VMM start, state dir, checks; to the Running line of the launcher log), median of %d: %.1f ms\n", n, o / 1000
  printf "launch overhead (median difference): %.1f ms\n", (o - b) / 1000
  printf "first console output: bare %.1f ms, ch-launcher run %.1f ms (medians of %d)\n", bc / 1000, oc / 1000, n }'
awk -v r="$rss" -v t="$threads" 'BEGIN { printf "launcher RSS with a running VM: %.1f MiB (%d threads)\n", r / 1024, t }'
echo "launcher context switches in 10 s idle: $((cs1 - cs0))"
# For bench/run.sh: key, what, ours, peer name, peer, unit, target kind, target.
awk -v b="$b" -v o="$o" -v bc="$bc_" -v oc="$oc" -v r="$rss" -v cs="$((cs1 - cs0))" -v on="$on" 'BEGIN {
  printf "RESULT\tlaunch\trun -> Running (median; %s)\t%.1f\tbare VMM + curl create+boot\t%.1f\tms\tdiff_le\t5\n", on, o / 1000, b / 1000
  printf "RESULT\tlaunch_console\trun -> first console output (median; %s)\t%.1f\tbare VMM + curl create+boot\t%.1f\tms\tdiff_le\t5\n", on, oc / 1000, bc / 1000
  printf "RESULT\trss\tlauncher RSS, VM running (%s)\t%.1f\t\t\tMiB\tabs_le\t8\n", on, r / 1024
  printf "RESULT\tidle_wakeups\tlauncher wake-ups per second, idle (%s)\t%.1f\t\t\t/s\tabs_le\t0\n", on, cs / 10 }'
if [ -n "$mass_ms" ]; then
  printf 'RESULT\tfloor_mass_running_%d\tbare VMM + curl floor (%s): %d VMMs started at once, each vm.create + vm.boot: last vm.boot answered\t%d\t\t\tms\tinfo\t\n' "$M" "$on" "$M" "$mass_ms"
  printf 'RESULT\tfloor_mass_vmm_pss_%d\tbare VMM + curl floor (%s): %d VMMs, VMs running: their PSS summed\t%.1f\t\t\tMiB\tinfo\t\n' "$M" "$on" "$M" "$(awk -v k="$mass_pss" 'BEGIN { print k / 1024 }')"
fi
