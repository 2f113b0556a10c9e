#!/usr/bin/env bash
# Build the test guests from the project's own sources with Debian's toolchain; nothing is
# downloaded. Outputs are cached: a guest is rebuilt only when its sources are newer.
#
#   scripts/build-guests.sh [--out DIR] [--if-available] [pvh|linux]...
#
#   pvh    tests/guests/pvh_guest.S → DIR/pvh-guest.elf: the minimal PVH guest (ELF64 with the
#          XEN_ELFNOTE_PHYS32_ENTRY note) for Cloud Hypervisor direct kernel boot and
#          qemu-system-x86_64 -kernel. See docs/guests.md.
#   linux  DIR/linux/{vmlinuz,vmlinux,initramfs.cpio.gz}: Debian's linux-image-*-cloud-amd64
#          (apt-get download -t bookworm, or the apt cache, or $CHL_LINUX_DEB; unpacked with
#          dpkg-deb -x under DIR/linux/cache, never installed) and a busybox-static initramfs
#          whose /init is tests/guests/linux/init. vmlinux (the uncompressed ELF with the PVH
#          note, for Cloud Hypervisor) only when lz4 is installed.
#
# DIR defaults to build/guests. With no guest named, every guest is built. Prints the path of
# each guest built or found up to date. Exit 1 with a message naming the failing step.
# --if-available: when the kernel package cannot be had (offline, no apt) or busybox-static /
# cpio are missing, say so and exit 0 without the Linux guest (its tests then skip).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/build/guests"
GUESTS=()
IF_AVAILABLE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --out=*) OUT=${1#--out=}; shift ;;
    --if-available) IF_AVAILABLE=1; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    pvh|linux) GUESTS+=("$1"); shift ;;
    *) echo "build-guests: unknown guest or option '$1' (known guests: pvh, linux)" >&2; exit 2 ;;
  esac
done
[ ${#GUESTS[@]} -eq 0 ] && GUESTS=(pvh linux)
mkdir -p "$OUT"

CC=${CC:-gcc}
LD=${LD:-ld}

# up_to_date OUTPUT SOURCES...: true when OUTPUT exists and is newer than every source.
up_to_date() {
  local out=$1; shift
  [ -f "$out" ] || return 1
  local src
  for src in "$@"; do [ "$src" -nt "$out" ] && return 1; done
  return 0
}

build_pvh() {
  local tool
  for tool in "$CC" "$LD"; do
    command -v "$tool" >/dev/null 2>&1 || { echo "build-guests: '$tool' not found (install build-essential)" >&2; return 1; }
  done
  local src="$ROOT/tests/guests/pvh_guest.S" lds="$ROOT/tests/guests/pvh_guest.ld"
  local out="$OUT/pvh-guest.elf"
  if up_to_date "$out" "$src" "$lds" "$0"; then
    echo "$out"
    return 0
  fi
  local tmp
  tmp=$(mktemp -d "$OUT/.pvh.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  "$CC" -c -m64 -nostdinc -o "$tmp/pvh_guest.o" "$src" \
    || { echo "build-guests: assembling $src failed" >&2; return 1; }
  local nowarn=()
  local ld_help
  ld_help=$("$LD" --help 2>/dev/null || true)
  if [[ "$ld_help" == *--no-warn-rwx-segments* ]]; then nowarn=(--no-warn-rwx-segments); fi
  "$LD" -m elf_x86_64 -nostdlib -static --build-id=none "${nowarn[@]}" -T "$lds" \
    -o "$tmp/pvh-guest.elf" "$tmp/pvh_guest.o" \
    || { echo "build-guests: linking the PVH guest failed" >&2; return 1; }
  mv -f "$tmp/pvh-guest.elf" "$out"   # atomic: never a half-written guest
  echo "$out"
}

# unavailable MESSAGE: the Linux guest cannot be built for want of something outside the project.
# With --if-available that is not an error (exit 0, tests skip); otherwise exit 1.
unavailable() {
  if [ "$IF_AVAILABLE" -eq 1 ]; then
    echo "build-guests: Linux guest not built: $1" >&2
    exit 0
  fi
  echo "build-guests: $1" >&2
  exit 1
}

# linux_deb DIR: print the path of a linux-image-*-cloud-amd64 .deb (not the metapackage):
# $CHL_LINUX_DEB, else the newest in the apt cache, else downloaded into DIR.
linux_deb() {
  local dir=$1
  if [ -n "${CHL_LINUX_DEB:-}" ]; then
    [ -f "$CHL_LINUX_DEB" ] || { echo "build-guests: CHL_LINUX_DEB=$CHL_LINUX_DEB does not exist" >&2; return 1; }
    echo "$CHL_LINUX_DEB"
    return 0
  fi
  local found
  found=$(ls -1 "$dir"/linux-image-[0-9]*-cloud-amd64_*_amd64.deb \
    /var/cache/apt/archives/linux-image-[0-9]*-cloud-amd64_*_amd64.deb 2>/dev/null | sort -V | tail -n1 || true)
  if [ -n "$found" ]; then
    echo "$found"
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || { echo "build-guests: apt-get not found" >&2; return 1; }
  # The metapackage names the kernel package of the same release; download both, keep the kernel.
  (cd "$dir" && apt-get download -q -t bookworm linux-image-cloud-amd64 >&2) \
    || { echo "build-guests: apt-get download -t bookworm linux-image-cloud-amd64 failed" >&2; return 1; }
  local meta dep pkg ver
  meta=$(ls -1 "$dir"/linux-image-cloud-amd64_*_amd64.deb | sort -V | tail -n1)
  dep=$(dpkg-deb -f "$meta" Depends)  # "linux-image-6.1.0-50-cloud-amd64 (= 6.1.176-1)"
  pkg=$(echo "$dep" | sed -n 's/^\(linux-image-[^ ,]*-cloud-amd64\).*/\1/p')
  ver=$(echo "$dep" | sed -n 's/^[^(]*(= \([^)]*\)).*/\1/p')
  [ -n "$pkg" ] || { echo "build-guests: cannot read the kernel package from '$dep' ($meta)" >&2; return 1; }
  (cd "$dir" && apt-get download -q "$pkg${ver:+=$ver}" >&2) \
    || { echo "build-guests: apt-get download $pkg${ver:+=$ver} failed" >&2; return 1; }
  rm -f "$meta"
  ls -1 "$dir/${pkg}"_*_amd64.deb | sort -V | tail -n1
}

# The Linux guest: Debian's cloud kernel, unpacked once into DIR/linux/cache/kernel, and an
# initramfs of busybox-static, tests/guests/linux/init and the modules listed in
# tests/guests/linux/modules with their dependencies (from the kernel's modules.dep, which
# `busybox depmod` writes into the unpacked tree: the package ships none, depmod runs at install).
build_linux() {
  local dir="$OUT/linux" cache="$OUT/linux/cache"
  local init="$ROOT/tests/guests/linux/init" modlist="$ROOT/tests/guests/linux/modules"
  local agent="$ROOT/tests/guests/linux/agent"
  local tool
  for tool in busybox cpio gzip dpkg-deb; do
    command -v "$tool" >/dev/null 2>&1 || unavailable "'$tool' not found (scripts/setup.sh installs busybox-static and cpio)"
  done
  local bb
  bb=$(command -v busybox)
  if LC_ALL=C readelf -l "$bb" 2>/dev/null | grep -q 'Requesting program interpreter'; then
    unavailable "$bb is not statically linked (install busybox-static)"
  fi
  mkdir -p "$cache"
  local kroot="$cache/kernel"
  if ! ls "$kroot"/boot/vmlinuz-* >/dev/null 2>&1; then
    local deb
    deb=$(linux_deb "$cache") || unavailable "no linux-image-*-cloud-amd64 package (offline? set CHL_LINUX_DEB=/path/to.deb)"
    local tmp
    tmp=$(mktemp -d "$cache/.kernel.XXXXXX")
    dpkg-deb -x "$deb" "$tmp" || { rm -rf "$tmp"; echo "build-guests: dpkg-deb -x $deb failed" >&2; return 1; }
    local krel
    krel=$(ls -1 "$tmp/lib/modules" | head -n1)
    busybox depmod -b "$tmp" "$krel" || { rm -rf "$tmp"; echo "build-guests: depmod for $krel failed" >&2; return 1; }
    rm -rf "$kroot"
    mv "$tmp" "$kroot"
    echo "build-guests: kernel $krel unpacked from $(basename "$deb") into $kroot" >&2
  fi
  local vmlinuz krel
  vmlinuz=$(ls -1 "$kroot"/boot/vmlinuz-* | sort -V | tail -n1)
  krel=${vmlinuz##*/vmlinuz-}
  local moddir="$kroot/lib/modules/$krel"
  [ -f "$moddir/modules.dep" ] || { echo "build-guests: $moddir/modules.dep missing" >&2; return 1; }

  local out_k="$dir/vmlinuz" out_i="$dir/initramfs.cpio.gz"
  if up_to_date "$out_i" "$init" "$agent" "$modlist" "$0" "$bb" "$vmlinuz" /usr/sbin/qemu-ga && up_to_date "$out_k" "$vmlinuz"; then
    echo "$out_k"
    echo "$out_i"
    [ -f "$dir/vmlinux" ] && echo "$dir/vmlinux"
    return 0
  fi

  local tmp
  tmp=$(mktemp -d "$dir/.initramfs.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  local st="$tmp/root"
  mkdir -p "$st"/{bin,sbin,dev,proc,sys,mnt,tmp,etc,root} "$st/lib/modules/$krel"
  cp "$bb" "$st/bin/busybox"
  local a
  for a in $("$bb" --list); do
    [ "$a" = busybox ] || ln -s busybox "$st/bin/$a"
  done
  install -m 0755 "$init" "$st/init"
  # util-linux's blkid (busybox has none): what cloud-init runs to find its disk
  # (`blkid -tLABEL=cidata -odevice`), with the shared libraries it needs, at their host paths.
  local blkid_bin
  blkid_bin=$(PATH="$PATH:/usr/sbin:/sbin" command -v blkid || true)
  if [ -n "$blkid_bin" ]; then
    cp -L "$blkid_bin" "$st/sbin/blkid"
    local lib
    for lib in $(ldd "$blkid_bin" | sed -n 's,.*=> \(/[^ ]*\).*,\1,p; s,^[[:space:]]*\(/[^ ]*\) (.*,\1,p'); do
      mkdir -p "$st$(dirname "$lib")"
      cp -L "$lib" "$st$lib"
    done
  else
    echo "build-guests: util-linux blkid not found: the guest finds disks with busybox findfs only" >&2
  fi
  # Debian's real qemu-ga (package qemu-guest-agent) with its libraries, started by
  # tests/guests/linux/agent (/bin/chl-agent) on the virtio-serial port or vsock; and an
  # os-release for guest-get-osinfo (the host's: the guest's userland is Debian's too).
  install -m 0755 "$agent" "$st/bin/chl-agent"
  if [ -x /usr/sbin/qemu-ga ]; then
    mkdir -p "$st/usr/sbin"
    cp -L /usr/sbin/qemu-ga "$st/usr/sbin/qemu-ga"
    for lib in $(ldd /usr/sbin/qemu-ga | sed -n 's,.*=> \(/[^ ]*\).*,\1,p; s,^[[:space:]]*\(/[^ ]*\) (.*,\1,p'); do
      mkdir -p "$st$(dirname "$lib")"
      cp -L "$lib" "$st$lib"
    done
    [ -f /etc/os-release ] && cp -L /etc/os-release "$st/etc/os-release"
    printf 'root:x:0:0:root:/root:/bin/sh\n' > "$st/etc/passwd"
  else
    echo "build-guests: qemu-ga not found (scripts/setup.sh installs qemu-guest-agent): the guest has no agent" >&2
  fi
  # The modules and everything they depend on, as modules.dep says; its lines for them go along.
  local want=() m line
  while read -r m; do
    m=${m%%#*}; m=${m// /}
    [ -n "$m" ] && want+=("$m")
  done < "$modlist"
  : > "$st/lib/modules/$krel/modules.dep"
  printf '%s
' "${want[@]}" > "$st/etc/chl-modules"
  local files=()
  for m in "${want[@]}"; do
    line=$(grep -m1 -E "(^|/)$m\.ko:" "$moddir/modules.dep") \
      || { echo "build-guests: module $m not found in $moddir/modules.dep (built in? remove it from $modlist)" >&2; return 1; }
    # shellcheck disable=SC2206
    local parts=(${line/:/ })
    files+=("${parts[@]}")
  done
  local f
  for f in $(printf '%s
' "${files[@]}" | sort -u); do
    mkdir -p "$st/lib/modules/$krel/$(dirname "$f")"
    cp "$moddir/$f" "$st/lib/modules/$krel/$f"
    grep -m1 -E "^$f:" "$moddir/modules.dep" >> "$st/lib/modules/$krel/modules.dep"
  done
  (cd "$st" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -9n > "$tmp/initramfs.cpio.gz" \
    || { echo "build-guests: writing the initramfs (cpio | gzip) failed" >&2; return 1; }
  cp "$vmlinuz" "$tmp/vmlinuz"
  # vmlinux: the ELF inside the bzImage (Debian compresses it with LZ4), for PVH boot.
  rm -f "$dir/vmlinux"
  if command -v lz4 >/dev/null 2>&1; then
    local off
    for off in $(LC_ALL=C grep -obUaP '\x02\x21\x4c\x18' "$vmlinuz" | cut -d: -f1); do
      tail -c +$((off + 1)) "$vmlinuz" | lz4 -dc 2>/dev/null > "$tmp/vmlinux" || true
      if [ "$(head -c 4 "$tmp/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
        mv -f "$tmp/vmlinux" "$dir/vmlinux"
        break
      fi
    done
    [ -f "$dir/vmlinux" ] || echo "build-guests: no LZ4-compressed ELF found in $vmlinuz (vmlinux not written)" >&2
  fi
  echo "$krel" > "$dir/kernel-release"
  mv -f "$tmp/vmlinuz" "$out_k"
  mv -f "$tmp/initramfs.cpio.gz" "$out_i"   # last: its date marks the guest up to date
  echo "$out_k"
  echo "$out_i"
  [ -f "$dir/vmlinux" ] && echo "$dir/vmlinux"
  return 0
}

for g in "${GUESTS[@]}"; do
  case "$g" in
    pvh) build_pvh ;;
    linux) build_linux ;;
  esac
done
