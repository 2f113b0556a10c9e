#!/usr/bin/env bash
# The demo: one VM end to end through ch-launcher.
#   installs what it needs (Debian bookworm), builds, builds the PVH test guest, writes an example
#   VMI, runs `ch-launcher run`, shows the guest's console, pauses, resumes, shows status and the
#   event stream, and stops the VM cleanly.
# The VMM: a real `cloud-hypervisor` when one is on PATH (or CLOUD_HYPERVISOR_BIN is set);
# otherwise the project's VMM double — a test double of Cloud Hypervisor that runs no guest
# code — and the demo says so.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Installing dependencies (Debian bookworm packages)"
bash scripts/setup.sh
say "Building"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target ch-launcher vmm-double pvh_guest
CHL="$ROOT/$BUILD_DIR/bin/ch-launcher"

# Which VMM: a real Cloud Hypervisor when there is one; otherwise the QEMU/KVM path through
# libvirt (a real guest boots under QEMU); DEMO_VMM=double drives the project's VMM double.
VMM=${CLOUD_HYPERVISOR_BIN:-$(command -v cloud-hypervisor || true)}
VMI="$ROOT/examples/vmi-pvh-demo.yaml"
RUN_VMM=()
if [ -n "$VMM" ] && [ "${DEMO_VMM:-}" != double ]; then
  say "VMM: the real Cloud Hypervisor at $VMM"
  RUN_VMM=(--vmm-binary "$VMM")
elif [ "${DEMO_VMM:-}" = double ]; then
  VMM="$ROOT/$BUILD_DIR/tests/vmm_double/vmm-double"
  say "VMM: the project's VMM DOUBLE ($VMM), as asked (DEMO_VMM=double)."
  echo "   It speaks Cloud Hypervisor's API, events and console exactly, but it is a test double:"
  echo "   no guest code runs."
  RUN_VMM=(--vmm-binary "$VMM")
else
  VMI="$ROOT/examples/vmi-pvh-demo-qemu.yaml"
  say "VMM: no cloud-hypervisor binary here, so the demo runs the same VM on the QEMU/KVM path"
  echo "   (spec.hypervisor: qemu-kvm, QEMU through libvirt; the launcher starts its own libvirtd"
  echo "   if none answers, and picks KVM or software emulation and says why in its log). A real"
  echo "   guest boots. Install cloud-hypervisor (or set CLOUD_HYPERVISOR_BIN) for the Cloud"
  echo "   Hypervisor path; DEMO_VMM=double drives the project's VMM double instead."
fi

WORK=$(mktemp -d /tmp/chl-demo-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/kernel"
cp "$BUILD_DIR/guests/pvh-guest.elf" "$WORK/kernel/guest.elf"
STATE="$WORK/state"

say "The VMI ($VMI)"
cat "$VMI"
say "Checking it against the hypervisor"
"$CHL" validate --vmi "$VMI"

say "Starting: ch-launcher run (its JSON log goes to $WORK/launcher.log)"
"$CHL" run --vmi "$VMI" --state-dir "$STATE" "${RUN_VMM[@]}" \
  --volume "kernel-boot=$WORK/kernel" --log-file "$WORK/launcher.log" &
LAUNCHER=$!
for _ in $(seq 1 300); do
  "$CHL" status --state-dir "$STATE" --json 2>/dev/null | grep -q '"state":"Running"' && break
  sleep 0.1
done

"$CHL" events --state-dir "$STATE" > "$WORK/events.txt" &
EVENTS=$!
sleep 0.3

say "status"
"$CHL" status --state-dir "$STATE"

say "The guest's console (virt-serial0): typing 'hello'"
printf 'hello\r' | timeout 3 "$CHL" console --state-dir "$STATE" 2>/dev/null | tr -d '\r' | head -n 20 || true

say "pause / status / resume"
"$CHL" pause --state-dir "$STATE"
"$CHL" status --state-dir "$STATE" | head -n 1
"$CHL" resume --state-dir "$STATE"
"$CHL" status --state-dir "$STATE" | head -n 1

say "stop (ACPI power button, forced off after the grace period)"
"$CHL" stop --state-dir "$STATE"
set +e
wait "$LAUNCHER"
RC=$?
set -e
wait "$EVENTS" 2>/dev/null || true

say "The event stream, in libvirt's vocabulary"
cat "$WORK/events.txt"
say "ch-launcher run exited $RC (0 = the guest went down cleanly)"
ls "$STATE"
exit "$RC"
