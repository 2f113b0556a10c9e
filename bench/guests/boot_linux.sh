#!/usr/bin/env bash
# Boot time of the Linux test guest under QEMU software emulation (TCG): from starting QEMU to
# the first line /init prints ("chl-guest: init started"), to the cloud-init disk printed
# ("end LABEL=cidata") and to QEMU's exit after the guest's poweroff. Runs the bzImage (vmlinuz,
# QEMU's Linux boot protocol) and, when built, the uncompressed vmlinux (PVH entry, the way
# Cloud Hypervisor boots it). Figures go to docs/guests.md.
#
#   bench/guests/boot_linux.sh [--runs N] [--guests DIR] [--machine q35|pc]
#
# DIR defaults to build/guests (built there by scripts/build-guests.sh linux when missing).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RUNS=5
GUESTS="$ROOT/build/guests"
MACHINE=q35
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=${2:?}; shift 2 ;;
    --guests) GUESTS=${2:?}; shift 2 ;;
    --machine) MACHINE=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "boot_linux: unknown option '$1'" >&2; exit 2 ;;
  esac
done
command -v qemu-system-x86_64 >/dev/null || { echo "boot_linux: qemu-system-x86_64 not installed" >&2; exit 1; }
bash "$ROOT/scripts/build-guests.sh" --out "$GUESTS" linux >/dev/null
G="$GUESTS/linux"

tmp=$(mktemp -d /tmp/chl-bench-boot.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# A NoCloud disk (ISO 9660, label cidata); any writer will do, the figure is the boot.
mkdir -p "$tmp/ci"
printf '#cloud-config\nhostname: bench\n' > "$tmp/ci/user-data"
printf 'instance-id: bench\n' > "$tmp/ci/meta-data"
if command -v xorrisofs >/dev/null; then
  xorrisofs -quiet -V cidata -J -R -o "$tmp/ci.iso" "$tmp/ci" 2>/dev/null
else
  genisoimage -quiet -V cidata -J -R -o "$tmp/ci.iso" "$tmp/ci"
fi

ms() { echo $(( ($1 - $2) / 1000000 )); }

# run KERNEL: one boot; prints "init_ms cidata_ms exit_ms".
run() {
  local kernel=$1 start t_init=- t_ci=- line
  start=$(date +%s%N)
  while IFS= read -r line; do
    case "$line" in
      *"chl-guest: init started"*) t_init=$(ms "$(date +%s%N)" "$start") ;;
      *"end LABEL=cidata"*) t_ci=$(ms "$(date +%s%N)" "$start") ;;
    esac
  done < <(qemu-system-x86_64 -nodefaults -no-user-config -M "$MACHINE" -m 256 -display none \
             -serial stdio -accel tcg -no-reboot -kernel "$kernel" -initrd "$G/initramfs.cpio.gz" \
             -append "console=ttyS0 quiet panic=-1 poweroff" \
             -drive "file=$tmp/ci.iso,format=raw,if=none,id=d0,readonly=on" \
             -device virtio-blk-pci,drive=d0 2>&1)
  echo "$t_init $t_ci $(ms "$(date +%s%N)" "$start")"
}

# stats VALUES...: "median (min-max)".
stats() {
  local sorted
  sorted=$(printf '%s\n' "$@" | sort -n)
  local n=$#
  echo "$(echo "$sorted" | sed -n "$(( (n + 1) / 2 ))p") ($(echo "$sorted" | head -n1)-$(echo "$sorted" | tail -n1))"
}

echo "Linux guest boot under QEMU TCG, -M $MACHINE, $RUNS runs each; kernel $(cat "$G/kernel-release")"
echo "host: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %-22s %-22s %-22s\n' "kernel image" "first init line, ms" "cidata printed, ms" "QEMU exited, ms"
kernels=("$G/vmlinuz")
[ -f "$G/vmlinux" ] && kernels+=("$G/vmlinux")
for k in "${kernels[@]}"; do
  a=() b=() c=()
  for _ in $(seq "$RUNS"); do
    read -r x y z < <(run "$k")
    a+=("$x") b+=("$y") c+=("$z")
  done
  case "$k" in */vmlinuz) name="vmlinuz (bzImage)" ;; *) name="vmlinux (PVH ELF)" ;; esac
  printf '%-28s %-22s %-22s %-22s\n' "$name" "$(stats "${a[@]}")" "$(stats "${b[@]}")" "$(stats "${c[@]}")"
  # For bench/run.sh: start to the cloud-init disk read, median, as an info row.
  printf 'RESULT\tlinux_boot_%s\tLinux guest under QEMU TCG, %s: start to cidata read (median)\t%s\t\t\tms\tinfo\t\n' \
    "$(basename "$k")" "$name" "$(stats "${b[@]}" | cut -d' ' -f1)"
done
