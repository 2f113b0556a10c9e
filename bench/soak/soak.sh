#!/usr/bin/env bash
# Soak: N run/stop cycles of `ch-launcher run` (default 1000 against the VMM double; with
# --qemu, 50 against real QEMU through libvirt), one VM at a time. Each cycle: start, wait for
# Running, sample the launcher's RSS and open fds, stop, wait for the exit, then check that the
# exit code is 0, that no VMM/QEMU process of that cycle is left and that the state directory
# holds no socket, pid file or temporary file (each leftover is named on stderr). The VMM is the
# pid the launcher reports (`status --json`): QEMU is libvirtd's child, not the launcher's.
# Prints first/last/max RSS and fd count, orphans and leftovers, and RESULT lines for
# bench/run.sh (failures with their breakdown, RSS and fd growth with first/last/max).
# Usage: bench/soak/soak.sh [--qemu] [BUILD_DIR] [N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
QEMU=0
if [ "${1:-}" = "--qemu" ]; then QEMU=1; shift; fi
BUILD=${1:-$ROOT/build}
N=${2:-$([ "$QEMU" = 1 ] && echo 50 || echo 1000)}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
W=$(mktemp -d /tmp/chl-soak-XXXXXX)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$W"' EXIT
mkdir -p "$W/kernel" && cp "$BUILD/guests/pvh-guest.elf" "$W/kernel/guest.elf"
if [ "$QEMU" = 1 ]; then
  sed -e 's/name: pvh-demo/name: soak/' -e 's/hypervisor: cloud-hypervisor/hypervisor: qemu-kvm/' \
    "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/vmi.yaml"
  EXTRA=()
  what="QEMU through libvirt"
else
  sed -e 's/name: pvh-demo/name: soak/' "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/vmi.yaml"
  EXTRA=(--vmm-binary "$VMM")
  what="the VMM double"
fi
rss=(); fds=(); fail=0; orphans=0; leftovers=0
for i in $(seq 1 "$N"); do
  S="$W/state"
  "$CHL" run --vmi "$W/vmi.yaml" --state-dir "$S" "${EXTRA[@]}" --volume "kernel-boot=$W/kernel" \
    --log-file "$W/launcher.log" --log-level warn &
  lp=$!
  ok=0
  for _ in $(seq 1 600); do
    if "$CHL" status --state-dir "$S" --json 2>/dev/null | grep -q '"state":"Running"'; then ok=1; break; fi
    sleep 0.05
  done
  # A guest that has not set up its ACPI handling yet would miss the power button: wait for it to
  # say it is ready (on its console, logged by the launcher), as a person at the console would.
  for _ in $(seq 1 200); do
    grep -q ready "$S/virt-serial0-log" 2>/dev/null && break
    sleep 0.05
  done
  # The VMM's pid as the launcher reports it (QEMU is libvirtd's child, not the launcher's).
  # ("vmm" is the last key of the status object: its "pid" is the first one after it.)
  vmm=$("$CHL" status --state-dir "$S" --json 2>/dev/null | sed 's/.*"vmm"://' | grep -o '"pid":[0-9]*' | head -1 |
    cut -d: -f2 || true)
  rss+=("$(awk '/^VmRSS/ {print $2}' "/proc/$lp/status" 2>/dev/null || echo 0)")
  fds+=("$(ls "/proc/$lp/fd" 2>/dev/null | wc -l)")
  "$CHL" stop --state-dir "$S" --grace-period 5 >/dev/null 2>&1 || true
  rc=0
  wait "$lp" || rc=$?
  if [ "$ok" != 1 ] || [ "$rc" != 0 ]; then
    fail=$((fail + 1))
    echo "cycle $i: running=$ok exit=$rc" >&2
    tail -3 "$W/launcher.log" >&2 || true
  fi
  if [ -n "$vmm" ] && [ -e "/proc/$vmm" ] && ! grep -q '^State:.*Z' "/proc/$vmm/status" 2>/dev/null; then
    orphans=$((orphans + 1))
    echo "cycle $i: VMM $vmm left running" >&2
    kill -9 "$vmm" 2>/dev/null || true
  fi
  left=$(find "$S" \( -type s -o -name '*.tmp*' -o -name vmm.pid \) 2>/dev/null || true)
  if [ -n "$left" ]; then
    leftovers=$((leftovers + $(printf '%s\n' "$left" | wc -l)))
    echo "cycle $i: left behind: $(printf '%s ' $left)" >&2
  fi
  rm -rf "$S" "$W/launcher.log"
  if [ $((i % 100)) -eq 0 ]; then echo "soak: $i/$N cycles"; fi
done
first_rss=${rss[0]}; last_rss=${rss[$((N - 1))]}
max_rss=$(printf '%s\n' "${rss[@]}" | sort -n | tail -1)
first_fd=${fds[0]}; last_fd=${fds[$((N - 1))]}
max_fd=$(printf '%s\n' "${fds[@]}" | sort -n | tail -1)
echo "soak: $N cycles against $what: $fail failed, $orphans orphan processes, $leftovers leftover files"
echo "launcher RSS at Running (KiB): first $first_rss, last $last_rss, max $max_rss"
echo "launcher open fds at Running: first $first_fd, last $last_fd, max $max_fd"
key=$([ "$QEMU" = 1 ] && echo soak_qemu || echo soak_double)
printf 'RESULT\t%s_fail\tsoak, %d cycles (%s): failed cycles + orphans + leftovers (%d + %d + %d)\t%d\t\t\tcount\tabs_le\t0\n' \
  "$key" "$N" "$what" "$fail" "$orphans" "$leftovers" $((fail + orphans + leftovers))
printf 'RESULT\t%s_rss\tsoak: launcher RSS growth, last - first (first %s, last %s, max %s KiB)\t%.2f\t\t\tMiB\tabs_le\t0.5\n' \
  "$key" "$first_rss" "$last_rss" "$max_rss" "$(awk -v a="$last_rss" -v b="$first_rss" 'BEGIN {print (a - b) / 1024}')"
printf 'RESULT\t%s_fds\tsoak: launcher open fds growth, last - first (first %s, last %s, max %s)\t%d\t\t\tfds\tabs_le\t0\n' \
  "$key" "$first_fd" "$last_fd" "$max_fd" $((last_fd - first_fd))
[ $((fail + orphans + leftovers)) -eq 0 ]
