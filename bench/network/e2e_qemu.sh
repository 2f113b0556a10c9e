#!/usr/bin/env bash
# Pod networking end to end with a real guest: the Linux test guest's kernel under QEMU (TCG)
# on the tap that `ch-launcher network up` wires in a "pod" namespace joined to a "node"
# namespace by a veth. The guest (an overlay /init added to the test initramfs: virtio_net,
# busybox udhcpc) gets its lease by DHCP, pings its gateway, and serves on forwarded ports.
# Checks (exit 1 on failure): the lease is 10.0.2.2/24 via 10.0.2.1 with the pod's MTU, the
# gateway answers, the node reaches the guest on forwarded port 8080 and not on 9090, nothing
# is left afterwards. Figure: guest->node TCP (20 MiB sent by the guest on a node-opened
# connection through the masquerade DNAT) vs the same transfer over the plain node<->pod veth.
# Usage: bench/network/e2e_qemu.sh [BUILD_DIR]   (root; needs the Linux test guest built)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$ROOT/build}
G=${CHL_LINUX_GUEST_DIR:-$BUILD/guests/linux}
LAUNCHER=$BUILD/bin/ch-launcher
skip() { echo "e2e_qemu: SKIPPED: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
[ -f "$G/vmlinuz" ] && [ -f "$G/initramfs.cpio.gz" ] || skip "no Linux test guest in $G (scripts/build-guests.sh linux)"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
[ -x "$LAUNCHER" ] || skip "no $LAUNCHER"

TAG=$$
NODE=chle${TAG}n POD=chle${TAG}p
T=$(mktemp -d /tmp/chl-nete2e-XXXXXX)
UP_PID="" QEMU_PID=""
cleanup() {
  [ -n "$QEMU_PID" ] && kill "$QEMU_PID" 2>/dev/null && wait "$QEMU_PID" 2>/dev/null
  [ -n "$UP_PID" ] && kill -TERM "$UP_PID" 2>/dev/null && wait "$UP_PID" 2>/dev/null
  ip netns del "$NODE" 2>/dev/null || true
  ip netns del "$POD" 2>/dev/null || true
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "e2e_qemu: FAILED: $*"; echo "--- guest console:"; cat "$T/console.log" 2>/dev/null | tail -30; exit 1; }

# The test initramfs with virtio_net and the networking /init (lease, gateway ping, listeners
# on 8080/9090 and a 20 MiB sender on 5002): shared with tests/network/test_libvirt_network.cpp.
bash "$ROOT/tests/guests/linux/net-initrd.sh" "$G" "$T/initrd.cpio.gz" || { r=$?; [ $r = 3 ] && skip "the Linux test guest's network initramfs cannot be built"; exit $r; }
printf '#!/bin/sh\ndd if=/dev/zero bs=65536 count=320 2>/dev/null\n' > "$T/send.sh"; chmod 755 "$T/send.sh"

# node <-> pod
ip netns add "$NODE"; ip netns add "$POD"
ip -n "$NODE" link add n-eth0 mtu 1400 type veth peer name eth0 mtu 1400 netns "$POD"
ip -n "$NODE" addr add 192.168.77.1/24 dev n-eth0; ip -n "$NODE" link set n-eth0 up; ip -n "$NODE" link set lo up
ip -n "$POD" addr add 192.168.77.2/24 dev eth0; ip -n "$POD" link set eth0 up; ip -n "$POD" link set lo up
ip -n "$POD" route add default via 192.168.77.1
cat > "$T/vmi.yaml" <<'EOF'
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: e2e, uid: e2e-0001}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      interfaces:
      - name: default
        masquerade: {}
        ports: [{port: 8080}, {port: 5002}]
  networks: [{name: default, pod: {}}]
EOF
printf 'nameserver 10.96.0.10\nsearch e2e.svc.cluster.local\n' > "$T/resolv.conf"
ip netns exec "$POD" "$LAUNCHER" network up --vmi "$T/vmi.yaml" --resolv-conf "$T/resolv.conf" > "$T/up.log" 2>&1 &
UP_PID=$!
for _ in $(seq 100); do grep -q '^ready' "$T/up.log" && break; sleep 0.1; done
grep -q '^ready' "$T/up.log" || { cat "$T/up.log"; fail "network up did not get ready"; }
MAC=$(grep -o "mac [0-9a-f:]*" "$T/up.log" | head -1 | cut -d' ' -f2)
T0=$(date +%s.%N)
ip netns exec "$POD" qemu-system-x86_64 -accel tcg -m 256 -nodefaults -no-reboot -display none \
  -kernel "$G/vmlinuz" -initrd "$T/initrd.cpio.gz" -append "console=ttyS0 quiet panic=-1" \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no -device virtio-net-pci,netdev=n0,mac="$MAC" \
  -serial "file:$T/console.log" &
QEMU_PID=$!
for _ in $(seq 1800); do grep -q 'chl-net: ready' "$T/console.log" 2>/dev/null && break; sleep 0.1; done
grep -q 'chl-net: ready' "$T/console.log" || fail "guest did not get ready in 180 s"
T1=$(date +%s.%N)
grep 'chl-net:' "$T/console.log"
grep -q 'chl-net: lease ip=10.0.2.2 subnet=255.255.255.0 router=10.0.2.1 mtu=1400 dns=10.96.0.10' "$T/console.log" || fail "wrong or no lease"
grep -q 'chl-net: gateway ok' "$T/console.log" || fail "the guest could not ping its gateway"
# The guest's listeners start in the background just before "ready": retry a while.
OUT=""
for _ in $(seq 50); do
  OUT=$(ip netns exec "$NODE" busybox nc -w 5 192.168.77.2 8080 </dev/null 2>/dev/null || true)
  [ "$OUT" = hello-from-guest ] && break
  sleep 0.2
done
[ "$OUT" = hello-from-guest ] || fail "forwarded port 8080 answered '$OUT'"
if ip netns exec "$NODE" busybox nc -w 5 192.168.77.2 9090 </dev/null 2>/dev/null | grep -q hello; then
  fail "port 9090 is not forwarded but reached the guest"
fi
echo "e2e_qemu: lease, gateway, port 8080 forwarded, 9090 not: OK (guest ready $(echo "$T1 - $T0" | bc) s after QEMU start)"

# Throughput: 20 MiB from the guest (via DNAT on 5002) vs from the pod itself over the veth.
bytes_per_s() {  # NS HOST PORT
  local s e n
  s=$(date +%s.%N)
  n=$(ip netns exec "$1" busybox nc -w 30 "$2" "$3" </dev/null | wc -c)
  e=$(date +%s.%N)
  [ "$n" = 20971520 ] || { echo "e2e_qemu: got $n bytes from $2:$3" >&2; echo 0; return; }
  echo "$n / ($e - $s)" | bc -l
}
GUEST=$(bytes_per_s "$NODE" 192.168.77.2 5002)
ip netns exec "$POD" busybox nc -ll -p 5003 -e "$T/send.sh" &
NCP=$!
sleep 0.3
VETH=$(bytes_per_s "$NODE" 192.168.77.2 5003)
kill "$NCP" 2>/dev/null || true
printf 'RESULT\tnet_qemu_tcp_mbps\tguest->node TCP under QEMU TCG via masquerade vs the plain pod veth (20 MiB, busybox nc)\t%.1f\tveth\t%.1f\tMB/s\tinfo\t\n' \
  "$(echo "$GUEST / 1048576" | bc -l)" "$(echo "$VETH / 1048576" | bc -l)"
printf 'RESULT\tnet_qemu_ready_s\tQEMU TCG start to guest with DHCP lease and listeners\t%.1f\t\t\ts\tinfo\t\n' "$(echo "$T1 - $T0" | bc)"

kill "$QEMU_PID"; wait "$QEMU_PID" 2>/dev/null || true; QEMU_PID=""
kill -TERM "$UP_PID"; wait "$UP_PID" || fail "network up teardown failed: $(cat "$T/up.log")"; UP_PID=""
LEFT=$(ip -n "$POD" -o link show | grep -c -E 'k6t-|tap' || true)
[ "$LEFT" = 0 ] || fail "devices left behind: $(ip -n "$POD" -o link show)"
if command -v nft >/dev/null; then [ -z "$(ip netns exec "$POD" nft list tables)" ] || fail "nft table left behind"; fi
echo "e2e_qemu: teardown left nothing: OK"
