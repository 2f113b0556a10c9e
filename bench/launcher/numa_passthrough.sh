#!/usr/bin/env bash
# numa.guestMappingPassthrough's cost at start (issue 41): `ch-launcher run` start -> Running of
# the PVH test guest (64Mi on 2Mi hugepages, dedicatedCpuPlacement on the first CPU this script
# may use) with numa.guestMappingPassthrough (one memory zone bound to the CPU's host node) beside
# the same VMI without it, alternately, N runs each (default 1), against a real cloud-hypervisor
# (CLOUD_HYPERVISOR_BIN) or the VMM double. The time is the launcher's own "domain event Started"
# log line minus the start. Both VMIs need free 2 MiB hugepages: when fewer than 40 are free the
# script reserves 40 more (root: /proc/sys/vm/nr_hugepages) and puts the pool back at the end.
# Usage: bench/launcher/numa_passthrough.sh [BUILD_DIR] [N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-1}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
GUEST=$BUILD/guests/pvh-guest.elf
CPUS=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
FIRST=$(echo "$CPUS" | tr ',' '\n' | head -1 | cut -d- -f1)
if [ ! -d /sys/devices/system/node/node0 ]; then echo "numa_passthrough: this kernel shows no NUMA nodes: skipped"; exit 0; fi
FREE=/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages
POOL=/proc/sys/vm/nr_hugepages
BEFORE=$(cat "$POOL")
W=$(mktemp -d /tmp/chl-bench-numa-XXXXXX)
trap 'echo "$BEFORE" > "$POOL" 2>/dev/null || true; rm -rf "$W"' EXIT
if [ "$(cat "$FREE" 2>/dev/null || echo 0)" -lt 40 ]; then
  if ! echo $((BEFORE + 40)) > "$POOL" 2>/dev/null || [ "$(cat "$FREE")" -lt 40 ]; then
    echo "numa_passthrough: no 40 free 2 MiB hugepages and $POOL cannot give them: skipped"; exit 0
  fi
fi
mkdir -p "$W/kernel" && cp "$GUEST" "$W/kernel/guest.elf"
sed -e 's/name: pvh-demo/name: bench/' \
    -e 's/^      cores: 1$/      cores: 1\n      dedicatedCpuPlacement: true/' \
    -e 's/^      guest: 64Mi$/      guest: 64Mi\n      hugepages:\n        pageSize: 2Mi/' \
    "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/plain.yaml"
sed -e 's/^      dedicatedCpuPlacement: true$/      dedicatedCpuPlacement: true\n      numa:\n        guestMappingPassthrough: {}/' \
    "$W/plain.yaml" > "$W/numa.yaml"
grep -q pageSize "$W/plain.yaml" && grep -q guestMappingPassthrough "$W/numa.yaml"
NAME=numa_passthrough
. "$ROOT/bench/launcher/start_to_running.sh"
one() { start_to_running "$1" "$FIRST"; }  # one VMI-FILE -> start->Running in microseconds on stdout

plain=(); numa=()
for i in $(seq 1 "$N"); do
  plain+=("$(one "$W/plain.yaml")")
  numa+=("$(one "$W/numa.yaml")")
done
p=$(printf '%s\n' "${plain[@]}" | median)
o=$(printf '%s\n' "${numa[@]}" | median)
load=$(cut -d' ' -f1-3 /proc/loadavg)
echo "VMM: $VMM ($("$VMM" --version 2>/dev/null | head -1 || true)); CPU $FIRST; 64Mi on 2Mi hugepages; load $load"
awk -v p="$p" -v o="$o" -v n="$N" 'BEGIN {
  printf "run -> Running, dedicated CPU + hugepages + numa.guestMappingPassthrough, median of %d: %.1f ms\n", n, o / 1000
  printf "run -> Running, the same VMI without NUMA passthrough, median of %d: %.1f ms\n", n, p / 1000 }'
awk -v p="$p" -v o="$o" -v load="$load" 'BEGIN {
  printf "RESULT\tnuma_passthrough_start\trun -> Running with numa.guestMappingPassthrough, 64Mi on 2Mi hugepages (load %s)\t%.1f\tsame VMI without\t%.1f\tms\tinfo\t\n", load, o / 1000, p / 1000 }'
