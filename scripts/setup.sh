#!/usr/bin/env bash
# Install everything ch-launcher needs to build and test, from Debian bookworm only.
# Idempotent, no prompts; run as root (or with sudo available) on a fresh Debian 12.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake pkg-config git
  libcpp-httplib-dev nlohmann-json3-dev libboost-dev libseccomp-dev libspdlog-dev
  doctest-dev libexpected-dev libyaml-cpp-dev libvirt-dev zlib1g-dev libzstd-dev
  libdeflate-dev  # disks/: fast raw-deflate decompression of qcow2 compressed clusters
  # the real tools our tests check images and relays with
  qemu-utils dosfstools mtools xorriso genisoimage socat util-linux tmux curl procps
  qemu-system-x86  # boots the PVH test guest (tests/guests)
  busybox-static cpio lz4  # the Linux test guest's initramfs and vmlinux (scripts/build-guests.sh)
  libvirt-daemon-system libvirt-clients ovmf  # the qemu-kvm path (libvirtd, virt-xml-validate, EFI)
  libnl-route-3-dev libnftables-dev dnsmasq-base iperf3 iproute2  # pod networking (network/), its tests and bench
  isc-dhcp-client  # dhclient -6: the DHCPv6 client of the IPv6 masquerade netns test
  libnghttp2-dev libprotobuf-dev protobuf-compiler  # kubevirt/: KubeVirt's launcher protocol (HTTP/2 + protobuf-lite)
  libgrpc++-dev protobuf-compiler-grpc  # tests/kubevirt, bench/kubevirt: the real gRPC our transport is checked against
)

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
