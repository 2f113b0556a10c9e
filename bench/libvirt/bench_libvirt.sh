#!/usr/bin/env bash
# qemu-kvm path figures (issue 7), beside the Cloud Hypervisor path, on the same PVH test guest:
#   - `ch-launcher run` start -> the guest's first console line ("hello from COM1" in the
#     console log virt-serial0-log), median of N runs:
#       qemu cold:  no libvirtd running, the launcher starts virtlogd + libvirtd itself (and stops them);
#       qemu warm:  a launcher-style libvirtd already answers (started once by this script);
#       qemu warm --accel kvm (nested PVM KVM here: the PVH guest boots under it);
#       ch:         the Cloud Hypervisor path — against the VMM DOUBLE unless CLOUD_HYPERVISOR_BIN
#                   is set (the double prints a pretend banner: it runs no guest code, so this is
#                   the launcher's own cost, not a real VMM's);
#   - RSS with the VM running (steady state): launcher, libvirtd, virtlogd, QEMU / the CH VMM.
# Usage: bench/libvirt/bench_libvirt.sh [BUILD_DIR] [N]   (root; no libvirtd running at start)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-7}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
GUEST=$BUILD/guests/pvh-guest.elf
RUNDIR=/run/ch-launcher/libvirt
W=$(mktemp -d /tmp/chl-bench-lv-XXXXXX)
cleanup() {
  for f in "$RUNDIR/libvirtd.pid" "$RUNDIR/virtlogd.pid"; do
    [ -n "${WARM:-}" ] && [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$W"
}
trap cleanup EXIT
if [ -S /run/libvirt/libvirt-sock ] && virsh -c qemu:///system version >/dev/null 2>&1; then
  echo "bench: a libvirtd already answers; stop it first (the cold figure needs none)" >&2
  exit 1
fi
mkdir -p "$W/kernel" && cp "$GUEST" "$W/kernel/guest.elf"
sed -e 's/name: pvh-demo/name: bench/' "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/ch.yaml"
sed -e 's/name: pvh-demo/name: bench/' -e 's/hypervisor: cloud-hypervisor/hypervisor: qemu-kvm/' \
  -e 's/autoattachPodInterface: false/autoattachPodInterface: false\n      autoattachGraphicsDevice: false/' \
  "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/qemu.yaml"
now_us() { echo $(( $(date +%s%N) / 1000 )); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
# A process exists and is not a zombie (kill -0 succeeds on zombies, which linger here).
alive() { [ -r "/proc/$1/stat" ] && ! awk '{sub(/.*\) /, ""); exit ($1 == "Z" ? 0 : 1)}' "/proc/$1/stat"; }
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# one_run VMI EXTRA... : prints microseconds from `run` to the first console line; leaves the
# launcher running (pid in $W/lp) for the caller to measure, then stop.
one_run() {
  local vmi=$1; shift
  rm -rf "$W/state"
  local t0 t1
  t0=$(now_us)
  "$CHL" run --vmi "$vmi" --state-dir "$W/state" --volume "kernel-boot=$W/kernel" --log-level warning "$@" > /dev/null \
    2> "$W/run.log" &
  echo $! > "$W/lp"
  until grep -qs -e 'hello from COM1' -e 'pretend guest: booted' "$W/state/virt-serial0-log"; do
    if ! alive "$(cat "$W/lp")"; then echo "bench: launcher ended early:" >&2; cat "$W/run.log" >&2; exit 1; fi
    sleep 0.002
  done
  t1=$(now_us)
  echo $((t1 - t0))
}
stop_run() {
  "$CHL" kill --state-dir "$W/state" > /dev/null 2>&1 || true
  # The launcher is not our child (it was started in a command substitution): poll it away, so
  # the daemons it stops are gone before the next run.
  while alive "$(cat "$W/lp")"; do sleep 0.02; done
}
measure() {  # measure LABEL VMI EXTRA...: N runs, median ms; RSS on the last run
  local label=$1; shift
  local times=()
  for i in $(seq 1 "$N"); do
    times+=("$(one_run "$@")")
    if [ "$i" -eq "$N" ]; then
      sleep 2
      local lp qemu vmm
      lp=$(cat "$W/lp")
      qemu=$(pgrep -f 'guest=default_bench' | head -1 || true)
      vmm=$(pgrep -P "$lp" | head -1 || true)
      RSS_LINE="launcher $(rss_kib "$lp") KiB"
      if [ -n "$qemu" ]; then
        RSS_LINE+=", libvirtd $(rss_kib "$(cat $RUNDIR/libvirtd.pid)") KiB, virtlogd $(rss_kib "$(cat $RUNDIR/virtlogd.pid)") KiB, QEMU $(rss_kib "$qemu") KiB"
      elif [ -n "$vmm" ]; then
        RSS_LINE+=", VMM $(rss_kib "$vmm") KiB"
      fi
    fi
    stop_run
  done
  local med
  med=$(printf '%s\n' "${times[@]}" | median)
  printf '%-34s median %7.1f ms  (runs: %s ms)\n' "$label" "$(echo "$med / 1000" | bc -l)" \
    "$(printf '%s\n' "${times[@]}" | awk '{printf "%s%.0f", (NR>1?" ":""), $1/1000}')"
  printf '%-34s %s\n' "" "RSS: $RSS_LINE"
  # For bench/run.sh: the median as an info row (key from the label).
  printf 'RESULT\tfirst_line_%s\trun -> first console line, %s (median)\t%.1f\t\t\tms\tinfo\t\n' \
    "$(echo "$label" | tr -c 'a-z0-9\n' '_' | tr -s _)" "$label" "$(echo "$med / 1000" | bc -l)"
}

echo "host: $(nproc) CPUs, $(uname -r); KVM: $([ -e /sys/module/kvm_pvm ] && echo 'nested PVM (kvm_pvm)' || echo plain)"
echo "guest: $GUEST (PVH, 64 MiB, 1 vCPU); N=$N"
measure "qemu cold (libvirtd started) tcg" "$W/qemu.yaml" --accel tcg
# Warm: one launcher-style daemon pair kept for the next runs (a launcher that finds it
# answering uses it and leaves it running).
WARM=1
virtlogd -d -p "$RUNDIR/virtlogd.pid"
unshare --mount --propagation private -- /bin/sh -c 'mount --bind "$1" /etc/libvirt/qemu.conf && exec libvirtd -d -p "$2"' \
  sh "$RUNDIR/qemu.conf" "$RUNDIR/libvirtd.pid"
until virsh -c qemu:///system version > /dev/null 2>&1; do sleep 0.1; done
measure "qemu warm tcg" "$W/qemu.yaml" --accel tcg
measure "qemu warm kvm (nested PVM)" "$W/qemu.yaml" --accel kvm
measure "ch ($( [ -n "${CLOUD_HYPERVISOR_BIN:-}" ] && echo real || echo 'VMM double'))" "$W/ch.yaml" --vmm-binary "$VMM"
