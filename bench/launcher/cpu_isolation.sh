#!/usr/bin/env bash
# isolateEmulatorThread's cost at start (issue 41): `ch-launcher run` start -> Running of the PVH
# test guest with dedicatedCpuPlacement + isolateEmulatorThread (--cpu-set: the first two CPUs this
# script may use) beside the same VMI without them, alternately, N runs each (default 1), against
# a real cloud-hypervisor (CLOUD_HYPERVISOR_BIN) or the VMM double. The time is the launcher's own
# "domain event Started" log line minus the start; with isolation it includes the check of every
# VMM thread's CPUs after boot. The load average is printed with the figures.
# Usage: bench/launcher/cpu_isolation.sh [BUILD_DIR] [N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-1}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
GUEST=$BUILD/guests/pvh-guest.elf
CPUS=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
expand() { echo "$1" | tr ',' '\n' | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done; }
FIRST=$(expand "$CPUS" | sed -n 1p)
SECOND=$(expand "$CPUS" | sed -n 2p)
if [ -z "$SECOND" ]; then echo "cpu_isolation: needs two CPUs, this process may use $CPUS: skipped"; exit 0; fi
W=$(mktemp -d /tmp/chl-bench-iso-XXXXXX)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/kernel" && cp "$GUEST" "$W/kernel/guest.elf"
sed -e 's/name: pvh-demo/name: bench/' "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/plain.yaml"
sed -e 's/name: pvh-demo/name: bench/' \
    -e 's/^      cores: 1$/      cores: 1\n      dedicatedCpuPlacement: true\n      isolateEmulatorThread: true/' \
    "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/isolated.yaml"
grep -q isolateEmulatorThread "$W/isolated.yaml"
NAME=cpu_isolation
. "$ROOT/bench/launcher/start_to_running.sh"
cpus_line() { "$CHL" status --state-dir "$W/state" | grep '  cpus:'; }
one() {  # one VMI-FILE -> start->Running in microseconds on stdout
  if [ "$1" = "$W/isolated.yaml" ]; then
    start_to_running "$1" "$FIRST,$SECOND" cpus_line
  else
    start_to_running "$1" "$FIRST,$SECOND"
  fi
}

plain=(); iso=()
for i in $(seq 1 "$N"); do
  plain+=("$(one "$W/plain.yaml")")
  iso+=("$(one "$W/isolated.yaml")")
done
p=$(printf '%s\n' "${plain[@]}" | median)
o=$(printf '%s\n' "${iso[@]}" | median)
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "VMM: $VMM ($("$VMM" --version 2>/dev/null | head -1 || true)); CPUs $FIRST (vCPU) and $SECOND (emulator); load $load"
awk -v p="$p" -v o="$o" -v n="$N" 'BEGIN {
  printf "run -> Running, dedicatedCpuPlacement + isolateEmulatorThread, median of %d: %.1f ms\n", n, o / 1000
  printf "run -> Running, the same VMI without them, median of %d: %.1f ms\n", n, p / 1000 }'
awk -v p="$p" -v o="$o" -v load="$load" 'BEGIN {
  printf "RESULT\tcpu_isolation_start\trun -> Running with dedicated CPUs + isolateEmulatorThread (load %s)\t%.1f\tsame VMI without\t%.1f\tms\tinfo\t\n", load, o / 1000, p / 1000 }'
