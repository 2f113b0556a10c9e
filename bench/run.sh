#!/usr/bin/env bash
# Every benchmark of the project beside its peer, in one run, into bench/results.md (tables: ours,
# peer, ratio, target, met or not, each under its run's provenance: the benchmark, when, the load,
# which VMM), bench/results.tsv (the raw RESULT lines with their provenance) and
# bench/results.svg (each figure's margin against its target, drawn by gnuplot).
#
# Each benchmark prints its figures as RESULT lines, tab-separated:
#   RESULT  key  what  ours  peer-name  peer  unit  kind  target
# kind: faster_ge T  (times or sizes; met when peer/ours >= T)     rate_ge T (rates; met when ours/peer >= T)
#       abs_le T     (met when ours <= T)                 diff_le T (met when ours - peer <= T)
#       info         (no target)
# bench/run.sh adds four fields to each, its provenance: the benchmark's title, when (UTC), the
# load average at its start and end, the VMM it drove (vmm_of, or BENCH_VMM).
# Usage: bench/run.sh [--quick] [BUILD_DIR]   (--quick: fewer rounds, 1 qcow2 run; for CI smoke)
#        bench/run.sh [--quick] --only NAME [BUILD_DIR]   (only the benchmarks whose title contains
#                                     NAME, e.g. --only "mass start"; prints their RESULT lines and
#                                     leaves results.md/.tsv/.svg alone: put the lines in
#                                     results.tsv by hand and --render it)
#        bench/run.sh --render LOG   (only rebuild results.md/.tsv/.svg from the RESULT lines in LOG,
#                                     e.g. a run that was stopped part-way; RENDER_NOTE says what
#                                     the log is, in the table's heading)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0
RENDER=""
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
ONLY=""
if [ "${1:-}" = "--only" ]; then ONLY=${2:?--only takes part of a benchmark title}; shift 2; fi
if [ "${1:-}" = "--render" ]; then RENDER=${2:?--render takes the log of a run}; QUICK=1; fi
BUILD=${1:-$ROOT/build}
OUT=$ROOT/bench
# The Cloud Hypervisor rows (run -> Running and console beside the bare cloud-hypervisor + curl
# floor, launcher RSS, mass start, the image's pod) run on the real Cloud Hypervisor when there is
# one: CLOUD_HYPERVISOR_BIN, else ../shared/bin/cloud-hypervisor from the project's root (as CI
# has it; scripts/image.sh looks the same way); without one, on the VMM double. Every other
# benchmark runs on the double (CLOUD_HYPERVISOR_BIN is cleared for them), each saying why; the
# rows' text and BENCH_VMM name the VMM.
DOUBLE=$BUILD/tests/vmm_double/vmm-double
REAL_CH=${CLOUD_HYPERVISOR_BIN:-}
if [ -z "$REAL_CH" ] && [ -x "$ROOT/../shared/bin/cloud-hypervisor" ]; then
  REAL_CH=$(cd "$ROOT/../shared/bin" && pwd)/cloud-hypervisor
fi
export CLOUD_HYPERVISOR_BIN=
CH_USED="VMM double"
if [ -n "$REAL_CH" ] && [ -z "$RENDER" ]; then
  CH_USED="real CH $("$REAL_CH" --version 2>/dev/null | awk '{print $2; exit}')"
  echo "bench: the Cloud Hypervisor rows run on $REAL_CH ($CH_USED)"
elif [ -z "$RENDER" ]; then
  echo "bench: no real Cloud Hypervisor (CLOUD_HYPERVISOR_BIN unset, no ../shared/bin/cloud-hypervisor): the CH rows run on the VMM double"
fi
RAW=$(mktemp /tmp/chl-bench-raw-XXXXXX)
trap 'rm -f "$RAW"' EXIT

if [ -z "$RENDER" ]; then
bash "$ROOT/scripts/setup.sh" >/dev/null
if ! command -v gnuplot >/dev/null 2>&1 || ! command -v bc >/dev/null 2>&1; then
  echo "bench: installing gnuplot-nox (draws bench/results.svg) and bc"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -q -t bookworm --no-install-recommends gnuplot-nox bc </dev/null >/dev/null
fi
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target ch-launcher vmm-double pvh_guest console_bridge_bench \
  vmm_api_bench migration_bench events_bench cloud_init_bench vmi_bench qcow2_convert_bench network_bench kubevirt_bench bench_virt_launcher bench_guest_agent \
  bench_mass_start bench_access_credentials bench_migration_qemu webhook_bench \
  test_image test_bundle >/dev/null

r() { [ "$QUICK" = 1 ] && echo "$1" || echo "$2"; }
bench() {  # bench NAME COMMAND... : run, show its output, keep its RESULT lines (and where they came from)
  if [ -n "$ONLY" ] && [[ "$1" != *"$ONLY"* ]]; then return 0; fi
  local title=$1
  echo "=== $title"
  shift
  local log start load0
  log=$(mktemp)
  start=$(date -u '+%Y-%m-%d %H:%M'); load0=$(cut -d' ' -f1 /proc/loadavg)
  if "$@" 2>&1 | tee "$log"; then :; else echo "bench: $* failed (its figures are missing)"; fi
  # Fields 10-13 of each RESULT line, its provenance in results.md: the benchmark, when (UTC),
  # the load average at its start and end, the VMM it drove.
  grep '^RESULT' "$log" | awk -F'\t' -v OFS='\t' -v t="$title" -v w="$start-$(date -u +%H:%M) UTC" \
    -v l="$load0-$(cut -d' ' -f1 /proc/loadavg)" -v v="${BENCH_VMM:-$(vmm_of "$title")}" \
    '{ for (i = NF + 1; i <= 9; i++) $i = ""; print $1, $2, $3, $4, $5, $6, $7, $8, $9, t, w, l, v }' >> "$RAW" || true
  rm -f "$log"
}
# Which VMM each benchmark drives, by its title (BENCH_VMM=... before a bench line says it
# outright): the VMM double is a stand-in for Cloud Hypervisor that runs no guest code.
vmm_of() {
  local ch="${CLOUD_HYPERVISOR_BIN:+real Cloud Hypervisor ($CLOUD_HYPERVISOR_BIN)}"
  case "$1" in
    *"real CH"*|*"real Cloud Hypervisor"*) echo "real Cloud Hypervisor" ;;
    "launcher"*|"100 idle launchers"|"soak against the double") echo "${ch:-VMM double}" ;;
    "virtio-fs"*) echo "${ch:-VMM double} (start), QEMU TCG (guest read)" ;;
    "QEMU path vs CH path"*) echo "QEMU through libvirt, and the VMM double" ;;
    *libvirt*|"soak against QEMU") echo "QEMU through libvirt" ;;
    *QEMU*|*"real guest"*) echo "QEMU" ;;
    "VMM API client"|"CH live migration"*|"virt-launcher mode"*|"guest agent: "*|"access credentials"*|"mass start"*|"container image"*) echo "VMM double" ;;
    *) echo "none" ;;
  esac
}

B=$BUILD/bench
CLOUD_HYPERVISOR_BIN=$REAL_CH BENCH_VMM=$CH_USED bench "launcher: overhead, RSS, idle wake-ups, console, mass-start floor ($CH_USED)" \
  bash "$ROOT/bench/launcher/bench_launcher.sh" "$BUILD" "$(r 5 20)" "$(r 5 20)"
bench "launcher RSS with a pod interface (root: network namespaces)" bash "$ROOT/bench/launcher/pod_network_rss.sh" "$BUILD" "$(r 1 3)"
bench "100 idle launchers" bash "$ROOT/bench/launcher/idle_launchers.sh" "$BUILD" "$(r 20 100)" "$(r 5 10)"
CLOUD_HYPERVISOR_BIN=$REAL_CH BENCH_VMM=$CH_USED bench "isolateEmulatorThread: start -> Running with and without ($CH_USED)" bash "$ROOT/bench/launcher/cpu_isolation.sh" "$BUILD" "$(r 1 3)"
CLOUD_HYPERVISOR_BIN=$REAL_CH BENCH_VMM=$CH_USED bench "numa.guestMappingPassthrough: start -> Running with and without ($CH_USED)" bash "$ROOT/bench/launcher/numa_passthrough.sh" "$BUILD" "$(r 1 3)"
bench "console bridge vs socat" "$B/console_bridge/console_bridge_bench" $( [ "$QUICK" = 1 ] && echo --mib 16 --rounds 200 --trials 1 )
bench "VMM API client" "$B/vmm_api/vmm_api_bench" --vmm "$BUILD/tests/vmm_double/vmm-double" --kernel "$BUILD/guests/pvh-guest.elf" --n "$(r 200 2000)"
# A real CH cannot migrate under this machine's nested KVM (vm.send-migration fails with
# GetNestedState EINVAL, ../shared/bin/README.md): the migration rows stay on the double.
BENCH_VMM="VMM double (a real CH cannot migrate under this nested KVM: GetNestedState)" \
  bench "CH live migration (VMM double: protocol overhead only)" "$B/vmm_api/migration_bench" --vmm "$BUILD/tests/vmm_double/vmm-double" --n "$(r 3 9)"
bench "QEMU/libvirt live migration (two pods' own libvirtd, real QEMU)" env CHL_BENCH_N="$(r 3 7)" "$B/kubevirt/bench_migration_qemu"
bench "event stream" "$B/events/events_bench" --rounds "$(r 2 5)"
bench "cloud-init media" "$B/cloud_init/cloud_init_bench" --rounds "$(r 5 30)"
bench "VMI pipeline" "$B/vmi/vmi_bench" --n "$(r 200 2000)"
bench "qcow2 -> raw" "$B/disks/qcow2_convert_bench" /tmp "$(r 1 3)"
bench "KubeVirt gRPC transport: RSS, idle wake-ups" "$B/kubevirt/kubevirt_bench" --rpcs "$(r 400 2000)" --idle-seconds "$(r 3 10)"
bench "virt-launcher mode vs run and the real virt-launcher" "$B/kubevirt/bench_virt_launcher" "$BUILD/bin/ch-launcher" "$BUILD/tests/vmm_double/vmm-double" "$BUILD/guests/pvh-guest.elf" "$(r 3 10)"
bench "guest agent: GuestPing/GetGuestInfo latency, RSS and wake-ups with the poller" "$B/kubevirt/bench_guest_agent" "$BUILD/bin/ch-launcher" "$BUILD/tests/vmm_double/vmm-double" "$BUILD/guests/pvh-guest.elf" "$(r 50 200)"
bench "access credentials: Secret change to keys applied" "$B/kubevirt/bench_access_credentials" "$BUILD/bin/ch-launcher" "$BUILD/tests/vmm_double/vmm-double" "$BUILD/guests/pvh-guest.elf" "$(r 5 20)"
CHL_BENCH_N=$(r 50 200) bench "guest agent on the libvirt path (QEMU TCG, real qemu-ga in the Linux guest): GuestPing/GetGuestInfo latency" "$B/kubevirt/bench_guest_agent_qemu"
CLOUD_HYPERVISOR_BIN=$REAL_CH BENCH_VMM=$CH_USED bench "mass start: 1, 5, 20 virt-launcher-mode pods Synced at once ($CH_USED)" "$B/kubevirt/bench_mass_start" \
  $( [ "$QUICK" = 0 ] && echo --steady-after 380 ) "$BUILD/bin/ch-launcher" "$BUILD/tests/vmm_double/vmm-double" "$BUILD/guests/pvh-guest.elf" 1 5 20
bench "admission webhook: request storm over TLS (loopback), RSS idle" "$B/webhook/webhook_bench" "$BUILD/bin/chl-webhook" --n "$(r 200 1000)"
bench "pod networking" "$B/network/network_bench" --rounds "$(r 5 20)" --seconds "$(r 2 5)"
bench "pod networking, real guest" bash "$ROOT/bench/network/e2e_qemu.sh" "$BUILD"
CLOUD_HYPERVISOR_BIN=$REAL_CH BENCH_VMM="$CH_USED (the image's)" bench "container image: size, cold build, RSS in the pod" bash "$ROOT/bench/image/bench_image.sh" "$BUILD" $( [ "$QUICK" = 1 ] && echo --warm )
CLOUD_HYPERVISOR_BIN=$REAL_CH BENCH_VMM="$CH_USED (the bundle's)" bench "launcher bundle: size, start -> Running in a foreign root filesystem" bash "$ROOT/bench/image/bench_bundle.sh" "$BUILD"
bench "soak against the double" bash "$ROOT/bench/soak/soak.sh" "$BUILD" "$(r 100 1000)"
bench "soak against QEMU" bash "$ROOT/bench/soak/soak.sh" --qemu "$BUILD" "$(r 10 50)"
bench "virtio-fs: start with two filesystems; guest read (QEMU TCG)" bash "$ROOT/bench/virtiofs/bench_virtiofs.sh" "$BUILD" "$(r 3 10)"
bench "Linux guest boot (QEMU TCG)" bash "$ROOT/bench/guests/boot_linux.sh" --guests "$BUILD/guests" --runs "$(r 2 5)"
CLOUD_HYPERVISOR_BIN=$REAL_CH BENCH_VMM="QEMU through libvirt, and $CH_USED" \
  bench "QEMU path vs CH path: run -> first console line" bash "$ROOT/bench/libvirt/bench_libvirt.sh" "$BUILD"

if [ -n "$ONLY" ]; then
  echo "=== RESULT lines (--only: results.md/.tsv untouched)"
  cat "$RAW"
  exit 0
fi
fi  # not --render
if [ -n "$RENDER" ]; then grep '^RESULT' "$RENDER" > "$RAW" || true; fi
cp "$RAW" "$OUT/results.tsv"
# The table and the margins (>= 1 means the target is met).
awk -F'\t' -v when="$(date -u '+%Y-%m-%d %H:%M UTC')${RENDER:+, rendered from the RESULT lines of a log (${RENDER_NOTE:-a run stopped part-way, or runs put together})}" -v host="$(nproc) cores$([ -z "$RENDER" ] && echo ", load $(cut -d' ' -f1-3 /proc/loadavg)")" \
    -v quick="$([ -n "$RENDER" ] && echo 0 || echo "$QUICK")" -v margins="$OUT/results.margins" '
  function f(x) { return (x == "" ? "" : (x + 0 == int(x + 0) ? sprintf("%d", x) : (x + 0 >= 1000 ? sprintf("%.0f", x) : sprintf("%.3g", x)))) }
  BEGIN {
    print "# Benchmark results"
    print ""
    printf "Written by `bench/run.sh`%s on %s (%s). Each row: ours, the peer measured in the same run, the ratio, the target and whether it is met. Above each table, the run that measured its rows: the benchmark, when (UTC), the load average at its start and end (2 shared cores: other builds often run beside it), and the VMM it drove — the VMM double (a stand-in for Cloud Hypervisor that runs no guest code: protocol and launcher costs only), a real Cloud Hypervisor, QEMU, or none. The method of each figure is in the topic'"'"'s doc. Generated: edit the benchmarks, not this file.\n", (quick ? " --quick" : ""), when, host
    printf "" > margins
  }
  {
    # One table per provenance (fields 10-13), in the order they first appear.
    prov = (NF >= 13 ? $10 "\t" $11 "\t" $12 "\t" $13 : "-")
    if (!(prov in rows)) {
      order[++groups] = prov
      rows[prov] = (prov == "-" ? "\n## Rows whose provenance was not recorded (see the heading)\n\n" \
                    : sprintf("\n## %s\n\n%s, load %s, VMM: %s.\n\n", $10, $11, $12, $13)) \
                   "| figure | ours | peer | ratio | target | met |\n|---|---|---|---|---|---|\n"
    }
    key = $2; what = $3; ours = $4; pname = $5; peer = $6; unit = $7; kind = $8; t = $9
    ratio = ""; met = ""; margin = ""; target = ""
    if (kind == "faster_ge") {
      # Sizes (B, KiB, MiB, MB…) are smaller or larger, times faster or slower.
      better = (unit ~ /^(B|KiB|MiB|GiB|kB|MB|GB)$/ ? "smaller" : "faster"); worse = (better == "smaller" ? "larger" : "slower")
      ratio = peer / ours; target = "≥ " t "× " better; margin = ratio / t
      ratio = (ratio >= 1 ? sprintf("%.2f× %s", ratio, better) : sprintf("%.2f× %s", 1 / ratio, worse))
    }
    else if (kind == "rate_ge") { ratio = ours / peer; target = "≥ " t "×"; margin = ratio / t; ratio = sprintf("%.2f×", ratio) }
    else if (kind == "abs_le") { target = "≤ " t " " unit; margin = (ours > 0 ? t / ours : 10); if (t == 0) margin = (ours == 0 ? 1 : 0) }
    else if (kind == "diff_le") { ratio = sprintf("%+.1f %s", ours - peer, unit); target = "≤ +" t " " unit; margin = (ours > 0 ? (peer + t) / ours : 10) }
    if (kind != "info") { met = (margin >= 1 ? "yes" : "**no**"); if (margin > 10) margin = 10; printf "%s\t%.3f\n", key, margin >> margins }
    rows[prov] = rows[prov] sprintf("| %s | %s %s | %s | %s | %s | %s |\n", what, f(ours), unit, (pname == "" ? "—" : pname ": " f(peer) " " unit), ratio, target, met)
  }
  END { for (i = 1; i <= groups; i++) printf "%s", rows[order[i]] }' "$RAW" > "$OUT/results.md"

if command -v gnuplot >/dev/null 2>&1 && [ -s "$OUT/results.margins" ]; then
  gnuplot <<GP
set terminal svg size 900,420 font "sans,11" background "white"
set output "$OUT/results.svg"
set title "ch-launcher: each figure against its target (>= 1 met; capped at 10)"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.7
set logscale y
set yrange [0.1:10]
set ylabel "margin (target met at 1)"
set xtics rotate by -35 noenhanced
set key off
set grid ytics
plot "$OUT/results.margins" using 2:xtic(1) lc rgb "#3b7dd8", 1 with lines lc rgb "#d83b3b" lw 2
GP
  printf '\n![margins against targets](results.svg)\n' >> "$OUT/results.md"
fi
rm -f "$OUT/results.margins"
echo "=== bench/results.md"
cat "$OUT/results.md"
