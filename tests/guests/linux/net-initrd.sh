#!/usr/bin/env bash
# The Linux test guest's initramfs with networking: the test initramfs followed by an overlay
# (a later cpio entry replaces an earlier one) that adds virtio_net and its dependencies and an
# /init that
#   - gets a lease with busybox udhcpc on eth0 and prints it:
#       "chl-net: lease ip=IP subnet=MASK router=GW mtu=MTU dns=DNS"
#   - pings 10.0.2.1, the masquerade gateway: "chl-net: gateway ok" (or "... failed");
#   - with `chl.ipv6` on the kernel command line: waits up to 10 s for a default route from
#     router advertisements ("chl-net: ipv6 router fe80::..."), adds fd10:0:2::2/120 (KubeVirt's
#     static IPv6 address: busybox has no DHCPv6 client) and pings fd10:0:2::1
#     ("chl-net: ipv6 gateway ok"); with no advertised router (KubeVirt sends none) it takes
#     KubeVirt's documented static gateway, fd10:0:2::1 ("chl-net: ipv6 static gateway");
#   - for each `chl.reach=ADDR,PORT` on the kernel command line (IPv4 or IPv6): connects with
#     busybox nc and prints what the far end sent: "chl-net: reach ADDR PORT: REPLY";
#   - listens with busybox nc: 8080 and 9090 answer "hello-from-guest", 5002 sends 20 MiB of
#     zeros (throughput);
#   - starts the guest agent when the initramfs has one (/bin/chl-agent: Debian's qemu-ga on
#     virtio-serial or vsock, tests/guests/linux/agent);
#   - prints "chl-net: ready".
# Used by the pod networking end-to-end tests (bench/network/e2e_qemu.sh, QEMU on a tap
# directly; tests/network/test_libvirt_network.cpp, through `ch-launcher run`).
# Usage: tests/guests/linux/net-initrd.sh GUEST_DIR OUT   (GUEST_DIR: build/guests/linux)
# Exit 0: OUT written; 3: the guest or its kernel modules are missing (the reason on stderr).
set -euo pipefail
G=${1:?usage: net-initrd.sh GUEST_DIR OUT}
OUT=${2:?usage: net-initrd.sh GUEST_DIR OUT}
missing() { echo "net-initrd: $*" >&2; exit 3; }
[ -f "$G/initramfs.cpio.gz" ] && [ -f "$G/kernel-release" ] || missing "no Linux test guest in $G (scripts/build-guests.sh linux)"
KREL=$(cat "$G/kernel-release")
MODS=$G/cache/kernel/lib/modules/$KREL
[ -d "$MODS" ] || missing "no kernel modules in $MODS"
command -v cpio >/dev/null || missing "no cpio"

T=$(mktemp -d /tmp/chl-netinitrd-XXXXXX)
trap 'rm -rf "$T"' EXIT
R=$T/root
mkdir -p "$R/lib/modules/$KREL/kernel/drivers/net" "$R/lib/modules/$KREL/kernel/net/core"
cp "$MODS/kernel/drivers/net/virtio_net.ko" "$MODS/kernel/drivers/net/net_failover.ko" "$R/lib/modules/$KREL/kernel/drivers/net/"
cp "$MODS/kernel/net/core/failover.ko" "$R/lib/modules/$KREL/kernel/net/core/"
cat > "$R/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev && mount -t devtmpfs devtmpfs /dev 2>/dev/null
M=/lib/modules/$(uname -r)/kernel
for m in drivers/virtio/virtio.ko drivers/virtio/virtio_ring.ko drivers/virtio/virtio_pci_modern_dev.ko \
         drivers/virtio/virtio_pci_legacy_dev.ko drivers/virtio/virtio_pci.ko net/core/failover.ko \
         drivers/net/net_failover.ko drivers/net/virtio_net.ko; do
  insmod "$M/$m" 2>/dev/null
done
ip link set lo up
ip link set eth0 up || echo "chl-net: no eth0"
udhcpc -i eth0 -f -q -n -t 10 -T 2 -s /lease.sh || echo "chl-net: no lease"
if ping -c 2 -W 3 10.0.2.1 >/dev/null 2>&1; then echo "chl-net: gateway ok"; else echo "chl-net: gateway failed"; fi
# With chl.ipv6 on the command line (a dual-stack pod): the router from the bridge's
# advertisements, then KubeVirt's static address (busybox has no DHCPv6 client) and a ping6.
if grep -qw chl.ipv6 /proc/cmdline; then
  i=0 r=""
  while [ $i -lt 20 ]; do
    r=$(ip -6 route show default 2>/dev/null | grep -o 'via fe80:[0-9a-f:]*')
    [ -n "$r" ] && break
    i=$((i + 1)); sleep 0.5
  done
  echo "chl-net: ipv6 router ${r#via }"
  ip -6 addr add fd10:0:2::2/120 dev eth0
  if [ -z "$r" ]; then ip -6 route add default via fd10:0:2::1 dev eth0 && echo "chl-net: ipv6 static gateway"; fi
  i=0
  while [ $i -lt 40 ] && ip -6 addr show dev eth0 | grep -q tentative; do i=$((i + 1)); sleep 0.5; done
  ip -6 addr show dev eth0 | grep -q tentative && echo "chl-net: fd10:0:2::2 still tentative" || echo "chl-net: ipv6 address ready after $i"
  ok=failed i=0
  while [ $i -lt 5 ]; do
    if ping6 -c 1 -W 2 fd10:0:2::1 >/dev/null 2>&1; then ok=ok; break; fi
    i=$((i + 1)); sleep 0.5
  done
  echo "chl-net: ipv6 gateway $ok"
fi
for a in $(cat /proc/cmdline); do
  case "$a" in chl.reach=*,*) t=${a#chl.reach=}; h=${t%,*}; p=${t##*,}
    i=0 got=""
    while [ $i -lt 5 ] && [ -z "$got" ]; do got=$(echo | nc -w 5 "$h" "$p" 2>&1); i=$((i + 1)); [ -n "$got" ] || sleep 1; done
    echo "chl-net: reach $h $p: $got"
    case "$got" in hello*) ;; *) ip addr; ip route; ip -6 route ;; esac ;;
  esac
done
nc -ll -p 8080 -e /hello.sh &
nc -ll -p 9090 -e /hello.sh &
nc -ll -p 5002 -e /send.sh &
# The user with a home the access-credential tests give keys and a password (qemu-ga's
# guest-ssh-add-authorized-keys reads getpwnam's home and chowns ~/.ssh to the user).
chown 1000:1000 /home/chl && chmod 755 /home/chl
# A distribution's PATH for the agent (the kernel starts /init without one; qemu-ga finds
# chpasswd in PATH).
export PATH=/sbin:/usr/sbin:/bin:/usr/bin
[ -x /bin/chl-agent ] && /bin/chl-agent
sleep 1
echo "chl-net: ready"
while true; do sleep 1000; done
INIT
cat > "$R/lease.sh" <<'LEASE'
#!/bin/sh
[ "$1" = bound ] || exit 0
echo "chl-net: lease ip=$ip subnet=$subnet router=$router mtu=$mtu dns=$dns"
ifconfig "$interface" "$ip" netmask "$subnet" mtu "${mtu:-1500}" up
set -- $router
route add default gw "$1" dev "$interface"
LEASE
# A user with a home for the access-credential tests (qemu-ga's guest-ssh-add-authorized-keys and
# guest-set-user-password act on a real account: getpwnam, ~/.ssh, chpasswd). Replaces the base
# initramfs's root-only /etc/passwd.
mkdir -p "$R/etc" "$R/home/chl" "$R/usr/sbin"
printf 'root:x:0:0:root:/root:/bin/sh\nchl:x:1000:1000:chl:/home/chl:/bin/sh\n' > "$R/etc/passwd"
printf 'root:x:0:\nchl:x:1000:\n' > "$R/etc/group"
printf 'root:*:20000:0:99999:7:::\nchl:!:20000:0:99999:7:::\n' > "$R/etc/shadow"
chmod 600 "$R/etc/shadow"
# qemu-ga's guest-set-user-password runs `chpasswd` (or `chpasswd -e` for a crypted one) from PATH
# with "user:password" on stdin (qga/commands-posix.c qmp_guest_set_user_password). Debian's
# busybox has no chpasswd applet, only mkpasswd: this one does chpasswd's job on /etc/shadow.
cat > "$R/usr/sbin/chpasswd" <<'CHPASSWD'
#!/bin/sh
[ "$1" = -e ] && crypted=1
IFS= read -r line || exit 1
user=${line%%:*} pw=${line#*:}
[ -n "$user" ] && [ "$user" != "$line" ] || { echo "chpasswd: bad input" >&2; exit 1; }
grep -q "^$user:" /etc/shadow || { echo "chpasswd: no user $user" >&2; exit 1; }
[ -n "$crypted" ] || pw=$(mkpasswd -m sha512 "$pw") || exit 1
sed -i "s|^$user:[^:]*:|$user:$pw:|" /etc/shadow
CHPASSWD
printf '#!/bin/sh\necho hello-from-guest\n' > "$R/hello.sh"
printf '#!/bin/sh\ndd if=/dev/zero bs=65536 count=320 2>/dev/null\n' > "$R/send.sh"
chmod 755 "$R/init" "$R/lease.sh" "$R/hello.sh" "$R/send.sh" "$R/usr/sbin/chpasswd"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$T/overlay.cpio.gz"
cat "$G/initramfs.cpio.gz" "$T/overlay.cpio.gz" > "$OUT.tmp"
mv -f "$OUT.tmp" "$OUT"
