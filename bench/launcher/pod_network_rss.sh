#!/usr/bin/env bash
# The launcher's RSS with the VM running for the typical VMI (issue 19, item 5): KubeVirt gives a
# VMI the default pod interface unless autoattachPodInterface is false (bridge binding, the
# cluster default, vmi/defaults.cpp; many clusters set masquerade), so `run` wires the pod
# network. Measured for the defaulted interface and for an explicit masquerade one, beside the
# same VMI without interfaces, all on the VMM double (or CLOUD_HYPERVISOR_BIN) with the PVH test
# guest:
#   - a pod: a network namespace this script makes, its eth0 a veth to a "node" namespace
#     (10.244.0.5/24, default route via 10.244.0.1), the launcher run in it (ip netns exec);
#   - wait for Running on the command socket, 2 s of steady state, VmRSS of the launcher;
#   - the median of N runs of each; also says whether libchl-network, libnl-route or libnftables
#     are mapped in the launcher then (they should not be: phase 1 runs in a child that exits).
# Needs root (network namespaces, the launcher wiring the pod); says why and prints no RESULT
# line without it.
# Usage: bench/launcher/pod_network_rss.sh [BUILD_DIR] [N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-3}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
GUEST=$BUILD/guests/pvh-guest.elf
if [ "$(id -u)" -ne 0 ]; then
  echo "pod network RSS: skipped (needs root for network namespaces)"
  exit 0
fi
TAG=chlrss$$
POD=${TAG}p
NODE=${TAG}n
W=$(mktemp -d /tmp/chl-bench-podrss-XXXXXX)
cleanup() {
  pkill -P $$ 2>/dev/null || true
  ip netns del "$POD" 2>/dev/null || true
  ip netns del "$NODE" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
if ! ip netns add "$POD" 2>/dev/null || ! ip netns add "$NODE" 2>/dev/null; then
  echo "pod network RSS: skipped (cannot create network namespaces here)"
  exit 0
fi
ip -n "$NODE" link add n-eth0 type veth peer name eth0 netns "$POD"
ip -n "$NODE" addr add 10.244.0.1/24 dev n-eth0
ip -n "$NODE" link set n-eth0 up
ip -n "$POD" addr add 10.244.0.5/24 dev eth0
ip -n "$POD" link set eth0 up
ip -n "$POD" link set lo up
ip -n "$POD" route add default via 10.244.0.1

mkdir -p "$W/kernel" && cp "$GUEST" "$W/kernel/guest.elf"
# The demo VMI without interfaces, the same with KubeVirt's default pod interface, and with one
# masquerade interface.
sed -e 's/name: pvh-demo/name: bench/' "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/vmi-none.yaml"
grep -v 'autoattachPodInterface: false' "$W/vmi-none.yaml" > "$W/vmi-pod.yaml"
sed -e 's/      autoattachPodInterface: false/      interfaces: [{name: default, masquerade: {}}]/' \
  "$W/vmi-none.yaml" > "$W/vmi-masq.yaml"
echo "  networks: [{name: default, pod: {}}]" >> "$W/vmi-masq.yaml"
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# run_once VMI NETNS-OR-EMPTY: prints "RSS_KB MAPPED" (MAPPED: the wiring libraries mapped, or -)
run_once() {
  local vmi=$1 ns=$2 prefix=()
  [ -n "$ns" ] && prefix=(ip netns exec "$ns")
  rm -rf "$W/state"
  local t0
  t0=$(( $(date +%s%N) / 1000 ))
  "${prefix[@]}" "$CHL" run --vmi "$vmi" --state-dir "$W/state" --vmm-binary "$VMM" \
    --volume "kernel-boot=$W/kernel" --log-level info > /dev/null 2> "$W/run.log" &
  local lp=$! i=0
  until "$CHL" status --state-dir "$W/state" --json 2>/dev/null | grep -q '"state":"Running"'; do
    sleep 0.01
    i=$((i + 1))
    if [ "$i" -gt 2000 ] || ! kill -0 "$lp" 2>/dev/null; then
      echo "pod network RSS: the launcher did not reach Running; its log:" >&2
      cat "$W/run.log" >&2
      exit 1
    fi
  done
  # start -> Running: the launcher's own "Started" log line (as bench_launcher.sh), in ms.
  local ts
  ts=$(grep -m1 '"msg":"domain event Started' "$W/run.log" | sed 's/.*"timestamp":"\([^"]*\)".*/\1/')
  echo "$(( ($(date -d "$ts" +%s%6N) - t0) / 1000 ))" >> "$W/launch-$(basename "$vmi" .yaml)"
  sleep 2
  local rss mapped
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$lp/status")
  mapped=$(grep -o -E 'libchl-network[^ ]*|libnl-route[^ ]*|libnftables[^ ]*' "/proc/$lp/maps" | sort -u | tr '\n' ' ' || true)
  "$CHL" kill --state-dir "$W/state" > /dev/null
  wait "$lp" 2>/dev/null || true
  # The wiring time the launcher logs (discovery, plan, phase 1 and phase 2), for the record.
  grep -o 'interface(s) wired in [0-9]* ms' "$W/run.log" | grep -o '[0-9]* ms' >> "$W/wire-times" || true
  echo "$rss ${mapped:--}"
}

none=() pod=() masq=() mapped=""
for i in $(seq 1 "$N"); do
  read -r r _ < <(run_once "$W/vmi-none.yaml" "")
  none+=("$r")
  read -r r m < <(run_once "$W/vmi-pod.yaml" "$POD")
  pod+=("$r")
  if [ "$m" != "-" ]; then mapped="$mapped $m"; fi
  read -r r m < <(run_once "$W/vmi-masq.yaml" "$POD")
  masq+=("$r")
  if [ "$m" != "-" ]; then mapped="$mapped $m"; fi
done
left=$(ip -n "$POD" -o link | grep -c -E 'k6t-|tap' || true)
n=$(printf '%s\n' "${none[@]}" | median)
p=$(printf '%s\n' "${pod[@]}" | median)
q=$(printf '%s\n' "${masq[@]}" | median)
echo "VMM: $VMM; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "launcher RSS, VM running, no interface (kB, $N runs): ${none[*]}"
echo "launcher RSS, VM running, default pod interface (bridge binding) in a netns (kB, $N runs): ${pod[*]}"
echo "launcher RSS, VM running, one masquerade interface in a netns (kB, $N runs): ${masq[*]}"
echo "wiring libraries mapped in the launcher with the VM running: ${mapped:-none}"
echo "bridge/tap devices left in the pod after the runs: $left"
echo "pod network wired in (the launcher's log, every run): $(tr '\n' ' ' < "$W/wire-times" 2>/dev/null || true)"
for v in none pod masq; do
  echo "run -> Running, $v (ms, median of $N): $(median < "$W/launch-vmi-$v")"
done
awk -v n="$n" -v p="$p" -v q="$q" 'BEGIN {
  printf "RESULT\trss_pod\tlauncher RSS, VM running, default pod interface (wired in a netns)\t%.1f\tno interface\t%.1f\tMiB\tabs_le\t8\n", p / 1024, n / 1024
  printf "RESULT\trss_pod_masquerade\tlauncher RSS, VM running, masquerade interface (wired in a netns)\t%.1f\tno interface\t%.1f\tMiB\tabs_le\t8\n", q / 1024, n / 1024 }'
