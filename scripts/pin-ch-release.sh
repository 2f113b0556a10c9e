#!/usr/bin/env bash
# Pin the Cloud Hypervisor release and firmware the container image installs: download the three
# files named by the Dockerfile's *_VERSION args (or the versions given), compute their sha256
# and write them into the Dockerfile's *_SHA256 args. Run on a machine that can reach github.com
# (ours cannot), review the diff, commit it.
# Usage: scripts/pin-ch-release.sh [CH_VERSION [HYPERVISOR_FW_VERSION [EDK2_VERSION]]]
set -euo pipefail
cd "$(dirname "$0")/.."
arg() { sed -n "s/^ARG $1=//p" Dockerfile | head -1; }
ch=${1:-$(arg CH_VERSION)}
fw=${2:-$(arg HYPERVISOR_FW_VERSION)}
edk2=${3:-$(arg EDK2_VERSION)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetch() {  # fetch URL NAME
  echo "pin: $1" >&2
  curl -fsSL --retry 3 -o "$tmp/$2" "$1"
  sha256sum "$tmp/$2" | cut -d' ' -f1
}
ch_sum=$(fetch "https://github.com/cloud-hypervisor/cloud-hypervisor/releases/download/$ch/cloud-hypervisor-static" ch)
fw_sum=$(fetch "https://github.com/cloud-hypervisor/rust-hypervisor-firmware/releases/download/$fw/hypervisor-fw" fw)
edk2_sum=$(fetch "https://github.com/cloud-hypervisor/edk2/releases/download/$edk2/CLOUDHV.fd" edk2)
# Sanity: the VMM prints its version; the firmware files are not empty.
chmod +x "$tmp/ch"
"$tmp/ch" --version | grep -q "${ch#v}" || { echo "pin: downloaded binary does not say version $ch" >&2; exit 1; }
sed -i.bak \
  -e "s/^ARG CH_VERSION=.*/ARG CH_VERSION=$ch/" -e "s/^ARG CH_SHA256=.*/ARG CH_SHA256=$ch_sum/" \
  -e "s/^ARG HYPERVISOR_FW_VERSION=.*/ARG HYPERVISOR_FW_VERSION=$fw/" \
  -e "s/^ARG HYPERVISOR_FW_SHA256=.*/ARG HYPERVISOR_FW_SHA256=$fw_sum/" \
  -e "s/^ARG EDK2_VERSION=.*/ARG EDK2_VERSION=$edk2/" -e "s/^ARG CLOUDHV_SHA256=.*/ARG CLOUDHV_SHA256=$edk2_sum/" \
  Dockerfile
rm -f Dockerfile.bak
echo "pin: Dockerfile now pins cloud-hypervisor $ch ($ch_sum), hypervisor-fw $fw ($fw_sum), CLOUDHV.fd $edk2 ($edk2_sum)"
