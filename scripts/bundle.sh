#!/usr/bin/env bash
# Make the self-contained launcher bundle: ch-launcher, its modules, virt-probe, Cloud Hypervisor
# and its firmware, and every shared library they load with their own loader, laid out to run
# from /opt/ch-launcher in a root filesystem that holds none of our libraries (KubeVirt's own
# launcher image; docs/deploy.md, "The launcher bundle").
#
#   scripts/bundle.sh BUILD_BIN VMM_DIR OUT
#
#   BUILD_BIN  the build's bin/ (ch-launcher, virt-probe, libchl-network.so, libchl-kubevirt.so)
#   VMM_DIR    where Cloud Hypervisor is: VMM_DIR/cloud-hypervisor or VMM_DIR/usr/bin/cloud-hypervisor
#              (image/vmm/ or the Dockerfile's vmm stage), firmware beside it or in
#              usr/share/cloud-hypervisor/; without one, image/vmm/placeholder-vmm.sh
#   OUT        the bundle directory (made; must not exist or be empty)
#
# Layout (OUT = /opt/ch-launcher in the pod):
#   bin/ch-launcher, bin/virt-launcher-monitor -> ch-launcher, bin/virt-launcher -> ch-launcher,
#   bin/virt-probe, bin/cloud-hypervisor, lib/ch-launcher/libchl-{network,kubevirt}.so (where
#   common/module_loader.cpp's find_module looks: <exe dir>/../lib/ch-launcher/),
#   share/cloud-hypervisor/ (firmware, when given), lib/ (the libraries and ld-linux-x86-64.so.2).
# Every ELF gets the interpreter /opt/ch-launcher/lib/ld-linux-x86-64.so.2 (PT_INTERP must be an
# absolute path: the kernel opens it before any $ORIGIN exists) and a DT_RUNPATH to the bundle's
# lib/ relative to itself ($ORIGIN/../lib; the modules $ORIGIN/../../lib). DT_RUNPATH, unlike
# DT_RPATH, serves only the object's own DT_NEEDED, so every library in lib/ carries one too: a
# library's own dependencies (libnftables -> libnftnl, libmnl, libjansson...) resolve in the bundle.
# The check at the end asks the bundle's loader (--list, the cache off) where each ELF's libraries
# come from and fails on any outside OUT. Prints one line with the bundle's files and size.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: bundle.sh BUILD_BIN VMM_DIR OUT" >&2; exit 2; }
bin_dir=$1 vmm_dir=$2 out=$3
here=$(cd "$(dirname "$0")/.." && pwd)
prefix=${CHL_BUNDLE_PREFIX:-/opt/ch-launcher}  # where the pod mounts it (docs/deploy.md)
loader_name=ld-linux-x86-64.so.2
die() { echo "bundle: $*" >&2; exit 1; }

command -v patchelf >/dev/null || die "patchelf is missing (apt-get install -t bookworm patchelf; scripts/setup.sh --build)"
for f in ch-launcher virt-probe libchl-network.so libchl-kubevirt.so; do
  [ -f "$bin_dir/$f" ] || die "$bin_dir/$f is missing (build the targets ch-launcher, virt-probe, chl_network_module, chl_kubevirt_module)"
done
if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then die "$out exists and is not empty"; fi

vmm=
for c in "$vmm_dir/cloud-hypervisor" "$vmm_dir/usr/bin/cloud-hypervisor"; do
  if [ -f "$c" ]; then vmm=$c; break; fi
done
[ -n "$vmm" ] || vmm=$here/image/vmm/placeholder-vmm.sh

mkdir -p "$out/bin" "$out/lib/ch-launcher"
strip --strip-unneeded -o "$out/bin/ch-launcher" "$bin_dir/ch-launcher"
strip --strip-unneeded -o "$out/bin/virt-probe" "$bin_dir/virt-probe"
for m in libchl-network.so libchl-kubevirt.so; do strip --strip-unneeded -o "$out/lib/ch-launcher/$m" "$bin_dir/$m"; done
install -m 0755 "$vmm" "$out/bin/cloud-hypervisor"
ln -s ch-launcher "$out/bin/virt-launcher-monitor"
ln -s ch-launcher "$out/bin/virt-launcher"
for fw_dir in "$vmm_dir" "$vmm_dir/usr/share/cloud-hypervisor"; do
  for fw in hypervisor-fw CLOUDHV.fd; do
    if [ -f "$fw_dir/$fw" ]; then
      mkdir -p "$out/share/cloud-hypervisor"
      install -m 0644 "$fw_dir/$fw" "$out/share/cloud-hypervisor/$fw"
    fi
  done
done

is_elf() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }
# Our ELFs: what the bundle runs (the placeholder VMM is a shell script: no ELF to patch).
ours=("$out/bin/ch-launcher" "$out/bin/virt-probe" "$out/lib/ch-launcher/libchl-network.so" "$out/lib/ch-launcher/libchl-kubevirt.so")
# A static CH (the release's cloud-hypervisor-static) has no interpreter and loads nothing.
if is_elf "$out/bin/cloud-hypervisor" && patchelf --print-interpreter "$out/bin/cloud-hypervisor" >/dev/null 2>&1; then
  ours+=("$out/bin/cloud-hypervisor")
fi

# The closure: what this machine's loader resolves for each of ours (ldd follows DT_NEEDED
# transitively). The loader itself is the "=>"-less line with an absolute path.
declare -A libs=()
loader=
for f in "${ours[@]}"; do
  while read -r line; do
    case $line in
      *"=> not found"*) die "$f: ${line%% =>*} is not found on this machine" ;;
      *"=> /"*) p=${line#*=> }; p=${p%% (*}; libs[$p]=1 ;;
      /*$loader_name*) loader=${line%% (*} ;;
    esac
  done < <(ldd "$f" 2>/dev/null || true)
done
[ -n "$loader" ] || loader=$(readlink -f /lib64/$loader_name)
install -m 0755 "$(readlink -f "$loader")" "$out/lib/$loader_name"
for p in "${!libs[@]}"; do
  install -m 0644 "$(readlink -f "$p")" "$out/lib/$(basename "$p")"
done

# Interpreter and RUNPATH. The loader is left as it is (it needs neither).
for f in "$out/bin/ch-launcher" "$out/bin/virt-probe"; do
  patchelf --set-interpreter "$prefix/lib/$loader_name" --set-rpath '$ORIGIN/../lib' "$f"
done
for f in "${ours[@]}"; do
  case $f in */bin/cloud-hypervisor) patchelf --set-interpreter "$prefix/lib/$loader_name" --set-rpath '$ORIGIN/../lib' "$f" ;; esac
done
for m in "$out"/lib/ch-launcher/*.so; do patchelf --set-rpath '$ORIGIN/../../lib' "$m"; done
for l in "$out"/lib/*.so*; do
  [ "$(basename "$l")" = "$loader_name" ] && continue
  patchelf --set-rpath '$ORIGIN' "$l"
done

# The check, with the bundle's own loader: --inhibit-cache (no /etc/ld.so.cache), a clean
# environment (no LD_LIBRARY_PATH); a library found outside OUT (the loader's default
# directories of this machine) or not at all fails the bundle.
bad=0
for f in "${ours[@]}" "$out"/lib/*.so*; do
  [ "$(basename "$f")" = "$loader_name" ] && continue
  listing=$(env -i "$out/lib/$loader_name" --inhibit-cache --list "$f" 2>&1) || { echo "bundle: $f: the loader says: $listing" >&2; bad=1; continue; }
  while read -r line; do
    case $line in
      *"=> not found"*) echo "bundle: $f: ${line%% =>*} not found in the bundle" >&2; bad=1 ;;
      *"=> /"*) p=${line#*=> }; p=${p%% (*}
        case $(readlink -f "$p") in "$(readlink -f "$out")"/*) ;; *) echo "bundle: $f: ${line%% =>*} resolves outside the bundle: $p" >&2; bad=1 ;; esac ;;
    esac
  done <<<"$listing"
done
[ "$bad" = 0 ] || die "the bundle at $out is not self-contained (above)"
for f in "$out/bin/ch-launcher" "$out/bin/virt-probe"; do
  [ "$(patchelf --print-interpreter "$f")" = "$prefix/lib/$loader_name" ] || die "$f: interpreter not set"
done

files=$(find "$out" -type f | wc -l)
kib=$(du -sk "$out" | cut -f1)
echo "bundle: $out: $files files, $((kib / 1024)) MiB ($kib KiB); VMM $(basename "$vmm")$( [ -d "$out/share/cloud-hypervisor" ] && echo ", firmware: $(ls "$out/share/cloud-hypervisor" | tr '\n' ' ')")"
