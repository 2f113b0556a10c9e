#!/usr/bin/env bash
# virtio-fs figures (issue 32):
#   1. the launcher's added start time for a VMI with two filesystems: `ch-launcher run` ->
#      Running (the launcher's own "domain event Started" log line) on Cloud Hypervisor (the
#      VMM double, or CLOUD_HYPERVISOR_BIN), with two of Debian's virtiofsd serving the sockets as
#      KubeVirt's virtiofs containers would (started before the launcher, so no waiting), beside
#      the same VMI without filesystems; median of N runs. The difference is the socket waits and
#      the vhost-user handshakes the VMM does.
#   2. root and QEMU only: sequential read of a 256 MiB file through virtio-fs in the Linux test
#      guest, beside the same read from a virtio-blk raw disk (dd, 1 MiB blocks, first read in
#      the guest; the host's page cache holds both files), QEMU under TCG through libvirt. TCG
#      emulates every guest instruction: the figures compare the two paths, not real hardware.
# Usage: bench/virtiofs/bench_virtiofs.sh [BUILD_DIR] [N]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
N=${2:-10}
CHL=$BUILD/bin/ch-launcher
VMM=${CLOUD_HYPERVISOR_BIN:-$BUILD/tests/vmm_double/vmm-double}
GUEST=$BUILD/guests/pvh-guest.elf
VFSD=""
for p in /usr/libexec/virtiofsd /usr/lib/qemu/virtiofsd; do [ -x "$p" ] && { VFSD=$p; break; }; done
[ -n "$VFSD" ] || { echo "bench_virtiofs: no virtiofsd (qemu-system-common's /usr/lib/qemu/virtiofsd)"; exit 0; }
[ "$(id -u)" = 0 ] || [ "$VFSD" = /usr/libexec/virtiofsd ] || { echo "bench_virtiofs: QEMU's virtiofsd needs root (chroot sandbox)"; exit 0; }
W=$(mktemp -d /tmp/chl-bench-vfs-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now_us() { echo $(( $(date +%s%N) / 1000 )); }

# start_vfsd NAME DIR: virtiofsd as KubeVirt's container runs it, on $W/socks/NAME.sock.
start_vfsd() {
  rm -f "$W/socks/$1.sock"
  if [ "$VFSD" = /usr/libexec/virtiofsd ]; then
    "$VFSD" --socket-path="$W/socks/$1.sock" --shared-dir="$2" --sandbox=none --cache=auto > "$W/vfsd-$1.log" 2>&1 &
  else
    "$VFSD" --socket-path="$W/socks/$1.sock" -o source="$2" -o cache=auto -o sandbox=chroot > "$W/vfsd-$1.log" 2>&1 &
  fi
  PIDS+=($!)
  while [ ! -S "$W/socks/$1.sock" ]; do sleep 0.005; done
}

mkdir -p "$W/kernel" "$W/socks" "$W/data" "$W/config"
cp "$GUEST" "$W/kernel/guest.elf"
sed -e 's/name: pvh-demo/name: bench/' "$ROOT/examples/vmi-pvh-demo.yaml" > "$W/plain.yaml"
{ cat "$W/plain.yaml"; printf '      filesystems:\n      - {name: data, virtiofs: {}}\n      - {name: config, virtiofs: {}}\n'
  printf '  volumes:\n  - {name: data, persistentVolumeClaim: {claimName: data}}\n  - {name: config, configMap: {name: config}}\n'; } > "$W/fs.yaml"

# One run: start -> the launcher's Started line, in microseconds.
one_run() {
  rm -rf "$W/state"
  local t0 lp ts
  t0=$(now_us)
  "$CHL" run --vmi "$1" --state-dir "$W/state" --vmm-binary "$VMM" --volume "kernel-boot=$W/kernel" \
    --virtiofs-dir "$W/socks" --virtiofs-wait 10 --log-level info 2> "$W/run.log" &
  lp=$!
  until grep -q '"msg":"domain event Started' "$W/run.log" 2>/dev/null; do
    kill -0 "$lp" 2>/dev/null || { echo "bench_virtiofs: the launcher ended:" >&2; cat "$W/run.log" >&2; exit 1; }
    sleep 0.002
  done
  ts=$(grep -m1 '"msg":"domain event Started' "$W/run.log" | sed 's/.*"timestamp":"\([^"]*\)".*/\1/')
  echo $(( $(date -d "$ts" +%s%6N) - t0 ))
  "$CHL" kill --state-dir "$W/state" > /dev/null
  wait "$lp" 2>/dev/null || true
}

plain=(); withfs=()
for i in $(seq 1 "$N"); do
  plain+=("$(one_run "$W/plain.yaml")")
  start_vfsd data "$W/data"
  start_vfsd config "$W/config"
  withfs+=("$(one_run "$W/fs.yaml")")
done
p=$(printf '%s\n' "${plain[@]}" | median)
f=$(printf '%s\n' "${withfs[@]}" | median)
echo "VMM: $VMM; virtiofsd: $VFSD; load: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v p="$p" -v f="$f" -v n="$N" 'BEGIN {
  printf "run -> Running, no filesystems, median of %d: %.1f ms\n", n, p / 1000
  printf "run -> Running, two virtiofs filesystems, median of %d: %.1f ms (added: %.1f ms)\n", n, f / 1000, (f - p) / 1000
  printf "RESULT\tvirtiofs_start\trun -> Running with two virtiofs filesystems (median)\t%.1f\tno filesystems\t%.1f\tms\tdiff_le\t5\n", f / 1000, p / 1000 }'

# 2. Sequential read in the guest, QEMU TCG.
[ "$(id -u)" = 0 ] && command -v qemu-system-x86_64 >/dev/null && command -v libvirtd >/dev/null || {
  echo "bench_virtiofs: the guest read needs root, QEMU and libvirt; skipped"; exit 0; }
LG=$BUILD/guests/linux
[ -f "$LG/vmlinuz" ] && [ -f "$LG/initramfs.cpio.gz" ] || { echo "bench_virtiofs: no Linux guest in $LG; skipped"; exit 0; }
cp "$LG/vmlinuz" "$W/kernel/vmlinuz"; cp "$LG/initramfs.cpio.gz" "$W/kernel/initrd.cpio.gz"
head -c $((256 << 20)) /dev/urandom > "$W/data/big.bin"
cp "$W/data/big.bin" "$W/blk.img"
cat "$W/data/big.bin" "$W/blk.img" > /dev/null  # both in the host's page cache
cat > "$W/read.yaml" <<'EOF'
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: benchfs, namespace: default, uid: 3c9e1d2a-0000-4000-8000-0000000000b1}
spec:
  hypervisor: qemu-kvm
  terminationGracePeriodSeconds: 5
  domain:
    memory: {guest: 512Mi}
    firmware:
      kernelBoot:
        kernelArgs: "console=ttyS0 quiet panic=-1 chl.virtiofs=data chl.virtiofs-read=data/big.bin chl.read=/dev/vda poweroff"
        container: {image: kernel-boot:latest, kernelPath: /vmlinuz, initrdPath: /initrd.cpio.gz}
    devices:
      autoattachGraphicsDevice: false
      autoattachPodInterface: false
      disks:
      - {name: blk, disk: {bus: virtio}}
      filesystems:
      - {name: data, virtiofs: {}}
  volumes:
  - {name: blk, persistentVolumeClaim: {claimName: blk}}
  - {name: data, persistentVolumeClaim: {claimName: data}}
EOF
start_vfsd data "$W/data"
rm -rf "$W/state"
"$CHL" run --vmi "$W/read.yaml" --state-dir "$W/state" --volume "kernel-boot=$W/kernel" --volume "blk=$W/blk.img" \
  --virtiofs-dir "$W/socks" --accel tcg --log-level info > "$W/qemu-run.log" 2>&1 || true
con=$(cat "$W/state/virt-serial0-log" 2>/dev/null || true)
fs_ms=$(printf '%s\n' "$con" | sed -n 's,.*chl-guest: read /mnt/fs-data/big.bin: 268435456 bytes in \([0-9]*\) ms.*,\1,p' | head -n1)
blk_ms=$(printf '%s\n' "$con" | sed -n 's,.*chl-guest: read /dev/vda: 268435456 bytes in \([0-9]*\) ms.*,\1,p' | head -n1)
if [ -z "$fs_ms" ] || [ -z "$blk_ms" ]; then
  echo "bench_virtiofs: the guest did not report both reads"; printf '%s\n' "$con" | tail -20; tail -20 "$W/qemu-run.log"; exit 0
fi
echo "guest sequential read of 256 MiB (QEMU TCG): virtio-fs $fs_ms ms, virtio-blk raw $blk_ms ms"
awk -v f="$fs_ms" -v b="$blk_ms" 'BEGIN {
  printf "RESULT\tvirtiofs_read\tguest read 256 MiB through virtio-fs (QEMU TCG)\t%.1f\tvirtio-blk raw disk\t%.1f\tMiB/s\tinfo\t\n", 256000 / f, 256000 / b }'
