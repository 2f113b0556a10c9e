#!/usr/bin/env bash
# Build the test guests from the project's own sources with Debian's toolchain; nothing is
# downloaded. Outputs are cached: a guest is rebuilt only when its sources are newer.
#
#   scripts/build-guests.sh [--out DIR] [pvh]...
#
#   pvh    tests/guests/pvh_guest.S → DIR/pvh-guest.elf: the minimal PVH guest (ELF64 with the
#          XEN_ELFNOTE_PHYS32_ENTRY note) for Cloud Hypervisor direct kernel boot and
#          qemu-system-x86_64 -kernel. See docs/guests.md.
#
# DIR defaults to build/guests. With no guest named, every guest is built. Prints the path of
# each guest built or found up to date. Exit 1 with a message naming the failing step.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/build/guests"
GUESTS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --out=*) OUT=${1#--out=}; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    pvh) GUESTS+=("$1"); shift ;;
    *) echo "build-guests: unknown guest or option '$1' (known guests: pvh)" >&2; exit 2 ;;
  esac
done
[ ${#GUESTS[@]} -eq 0 ] && GUESTS=(pvh)
mkdir -p "$OUT"

CC=${CC:-gcc}
LD=${LD:-ld}
for tool in "$CC" "$LD"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "build-guests: '$tool' not found (install build-essential)" >&2; exit 1; }
done

# up_to_date OUTPUT SOURCES...: true when OUTPUT exists and is newer than every source.
up_to_date() {
  local out=$1; shift
  [ -f "$out" ] || return 1
  local src
  for src in "$@"; do [ "$src" -nt "$out" ] && return 1; done
  return 0
}

build_pvh() {
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

for g in "${GUESTS[@]}"; do
  case "$g" in
    pvh) build_pvh ;;
  esac
done
