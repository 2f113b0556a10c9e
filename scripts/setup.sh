#!/usr/bin/env bash
# Install everything ch-launcher needs to build and test, from Debian bookworm only
# (--build: only what builds the product, as the container image's build stage does).
# Idempotent, no prompts; run as root (or with sudo available) on a fresh Debian 12.
set -euo pipefail

# What builds the product (ch-launcher and its modules). The container image's build stage
# installs exactly these (`setup.sh --build`, Dockerfile), so the two cannot drift.
BUILD_PACKAGES=(
  build-essential cmake pkg-config
  libcap2-bin  # setcap: the image's launcher gets cap_net_bind_service as a file capability (Dockerfile)
  patchelf  # scripts/bundle.sh: the launcher bundle's interpreter and RUNPATH (docs/deploy.md)
  libcpp-httplib-dev nlohmann-json3-dev libboost-dev libseccomp-dev libspdlog-dev
  libexpected-dev libyaml-cpp-dev libvirt-dev zlib1g-dev libzstd-dev
  libdeflate-dev  # disks/: fast raw-deflate decompression of qcow2 compressed clusters
  libnl-route-3-dev libnftables-dev  # network/: pod networking
  nettle-dev  # network/plan.cpp: SHA-256 of KubeVirt's hashed Multus interface names
  libnghttp2-dev libprotobuf-dev protobuf-compiler  # kubevirt/: KubeVirt's launcher protocol (HTTP/2 + protobuf-lite)
  libssl-dev  # webhook/: chl-webhook's HTTPS (OpenSSL under Boost.Asio's ssl::stream)
)
# What the tests, the demo and the benchmarks need besides.
TEST_PACKAGES=(
  git doctest-dev
  python3  # scripts/check-links.py: the docs' links (tests/docs)
  # the real tools our tests check images and relays with
  qemu-utils dosfstools mtools xorriso genisoimage socat util-linux tmux curl procps
  qemu-system-x86  # boots the PVH test guest (tests/guests)
  # virtiofsd for the virtio-fs tests and bench: bookworm has no `virtiofsd` package (the Rust one
  # came with trixie); QEMU 7.2's is /usr/lib/qemu/virtiofsd here (tests/support/virtiofsd.hpp)
  qemu-system-common
  busybox-static cpio lz4  # the Linux test guest's initramfs and vmlinux (scripts/build-guests.sh)
  libvirt-daemon-system libvirt-clients ovmf  # the qemu-kvm path (libvirtd, virt-xml-validate, EFI)
  swtpm swtpm-tools  # the qemu-kvm path's devices.tpm: libvirt starts swtpm (swtpm_setup) per domain
  dnsmasq-base iperf3 iproute2  # pod networking's tests and bench
  isc-dhcp-client  # dhclient -6: the DHCPv6 client of the IPv6 masquerade netns test
  mmdebstrap  # the image lane's base (scripts/image.sh); its Docker engine: scripts/docker-engine.sh
  qemu-guest-agent  # a real qemu-ga on the host (unix-listen, dangerous RPCs blocked): tests/guest_agent
  libgrpc++-dev protobuf-compiler-grpc  # tests/kubevirt, bench/kubevirt: the real gRPC our transport is checked against
  openssl  # scripts/webhook-cert.sh: the webhook's CA and serving certificate (tests/webhook, bench/webhook)
  python3-kubernetes python3-yaml  # scripts/check-k8s-manifests.py: deploy/webhook against Kubernetes' schema (tests/webhook)
)
case "${1:-}" in
  --build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  "") PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *) echo "usage: setup.sh [--build]   (--build: only what builds the product)" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q </dev/null
$SUDO apt-get install -y -q -t bookworm --no-install-recommends "${missing[@]}" </dev/null
