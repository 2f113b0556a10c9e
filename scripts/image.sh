#!/usr/bin/env bash
# Build the container image from the Dockerfile the way a builder without a registry does, and
# save it as the archive operators load into their nodes' runtime (docs/deploy.md).
#
#   scripts/image.sh [--no-cache] [--rebase]
#
# The base is made here: `mmdebstrap --variant=minbase bookworm` from this machine's configured
# Debian mirror, `docker import`ed as $CHL_IMAGE_BASE (made once; --rebase makes it again). Then
# the same Dockerfile users build, with BASE set to it. Needs a Docker engine that answers
# (scripts/docker-engine.sh start). Environment:
#   CHL_IMAGE        the tag to build (ch-launcher:dev)
#   CHL_IMAGE_BASE   the imported base's tag (chl-base:bookworm)
#   CHL_DEBIAN_MIRROR  the base's Debian mirror (the first one apt uses here)
#   CHL_IMAGE_OUT    where the archive goes (build/image): ch-launcher-image.tar, from `docker save`
#   CLOUD_HYPERVISOR_BIN  the Cloud Hypervisor the image carries. When image/vmm/ holds none, this
#                    one (else ../shared/bin/cloud-hypervisor from the project's root, as CI has it) is
#                    put there for the build and taken away after; with none, the Dockerfile's
#                    pinned release or its placeholder (image/vmm/README.md). CHL_IMAGE_VMM=none
#                    builds without one even so.
# Prints one line per step with its time, and the image's sizes.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${CHL_IMAGE:-ch-launcher:dev}
BASE=${CHL_IMAGE_BASE:-chl-base:bookworm}
OUT=${CHL_IMAGE_OUT:-build/image}
no_cache=()
rebase=0
for a in "$@"; do
  case $a in
    --no-cache) no_cache=(--no-cache) ;;
    --rebase) rebase=1 ;;
    *) echo "usage: image.sh [--no-cache] [--rebase]" >&2; exit 2 ;;
  esac
done

say() { echo "image: $*"; }
if ! docker info >/dev/null 2>&1; then
  echo "image: no Docker engine answers (start one: scripts/docker-engine.sh start)" >&2
  exit 1
fi

if [ "$rebase" = 1 ] || ! docker image inspect "$BASE" >/dev/null 2>&1; then
  command -v mmdebstrap >/dev/null || { echo "image: mmdebstrap is missing (apt-get install -t bookworm mmdebstrap)" >&2; exit 1; }
  # The mirror apt uses here (the first Debian URI of its sources), suite bookworm main only: the
  # packages the stages add are installed with -t bookworm, so the base must not hold newer ones
  # from other suites (a security update of perl-base breaks installing perl).
  mirror=${CHL_DEBIAN_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '/^URIs:/ {print $2; exit} /^deb / {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' | grep debian || true)}
  mirror=${mirror:-http://deb.debian.org/debian}
  start=$SECONDS
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # As debian:bookworm-slim is made: merged /usr without the usrmerge package (and the perl it
  # pulls in), and no documentation, manual pages or translations (dpkg path-exclude, which
  # stays in the base for the packages the image adds).
  mmdebstrap --quiet --variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/groff/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$tmp/base.tar" "deb $mirror bookworm main" </dev/null
  docker import --change 'CMD ["/bin/bash"]' --message "mmdebstrap --variant=minbase bookworm" "$tmp/base.tar" "$BASE" >/dev/null
  rm -rf "$tmp"
  trap - EXIT
  say "base $BASE made with mmdebstrap from $mirror in $((SECONDS - start)) s"
fi

# The VMM: image/vmm/cloud-hypervisor when a builder put one there; else the real CH we have,
# copied in for this build only (image/vmm/ is .gitignored: the binary is never committed).
vmm_copied=0
if [ ! -e image/vmm/cloud-hypervisor ] && [ "${CHL_IMAGE_VMM:-}" != none ]; then
  real_ch=${CLOUD_HYPERVISOR_BIN:-}
  if [ -z "$real_ch" ] && [ -x ../shared/bin/cloud-hypervisor ]; then real_ch=../shared/bin/cloud-hypervisor; fi
  if [ -n "$real_ch" ]; then
    [ -x "$real_ch" ] || { echo "image: CLOUD_HYPERVISOR_BIN=$real_ch is not an executable" >&2; exit 1; }
    trap 'rm -f image/vmm/cloud-hypervisor' EXIT
    cp "$real_ch" image/vmm/cloud-hypervisor
    vmm_copied=1
    say "vmm: $real_ch ($("$real_ch" --version 2>&1 | head -n 1)) into image/vmm/ for this build"
  fi
fi
if [ "${CHL_IMAGE_VMM:-}" = none ] && [ -e image/vmm/cloud-hypervisor ]; then
  echo "image: CHL_IMAGE_VMM=none but image/vmm/cloud-hypervisor is there (a builder's own): move it away first" >&2
  exit 1
fi

start=$SECONDS
docker build "${no_cache[@]}" --network host --build-arg "BASE=$BASE" -t "$IMAGE" . </dev/null
say "built $IMAGE from the Dockerfile (BASE=$BASE) in $((SECONDS - start)) s"
if [ "$vmm_copied" = 1 ]; then
  rm -f image/vmm/cloud-hypervisor
  trap - EXIT
fi
say "vmm in $IMAGE: $(docker run --rm --entrypoint /usr/bin/cloud-hypervisor "$IMAGE" --version 2>&1 | head -n 1 || true)"

mkdir -p "$OUT"
docker save -o "$OUT/ch-launcher-image.tar.part" "$IMAGE"
mv "$OUT/ch-launcher-image.tar.part" "$OUT/ch-launcher-image.tar"
unpacked=$(docker image inspect -f '{{.Size}}' "$IMAGE")
archive=$(stat -c %s "$OUT/ch-launcher-image.tar")
compressed=$(gzip -c "$OUT/ch-launcher-image.tar" | wc -c)
say "saved $OUT/ch-launcher-image.tar: $((archive / 1048576)) MiB; gzip $((compressed / 1048576)) MiB; unpacked $((unpacked / 1048576)) MiB"
