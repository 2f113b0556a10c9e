#!/usr/bin/env bash
# The container image's figures (issue 23), as RESULT lines for bench/run.sh:
#   - its size, unpacked (docker's) and compressed (docker save | gzip), beside KubeVirt's
#     virt-launcher image: 745 MB as docker listed it for v0.33.0 in kubevirt/kubevirt#4423 (the
#     only published figure we found; no registry answers here to pull a newer one). Its
#     compressed size is not published there: ours is given alone;
#   - the build from a cold cache: base (mmdebstrap) and `docker build --no-cache`;
#   - the launcher's RSS inside the container with a VM running on the pod network (the image
#     lane's pod, tests/image), beside the launcher's part of the pod overhead `ch-launcher
#     overhead` declares.
# Usage: bench/image/bench_image.sh BUILD_DIR [--warm]   (--warm: skip the cold build, use the
#        image there is). Needs root; starts a Docker engine when none answers (and stops it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:?usage: bench_image.sh BUILD_DIR [--warm]}" && pwd)
WARM=${2:-}
IMAGE=${CHL_IMAGE:-ch-launcher:dev}
result() { printf 'RESULT\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@"; }

bash "$ROOT/scripts/docker-engine.sh" start </dev/null
trap 'bash "$ROOT/scripts/docker-engine.sh" stop </dev/null' EXIT

if [ "$WARM" != --warm ]; then
  # Cold: no base, no image, no build cache.
  docker image rm -f "$IMAGE" "${CHL_IMAGE_BASE:-chl-base:bookworm}" >/dev/null 2>&1 || true
  docker builder prune -af >/dev/null 2>&1 || true
  log=$(mktemp)
  start=$(date +%s.%N)
  CHL_IMAGE_OUT="$BUILD/image" bash "$ROOT/scripts/image.sh" --rebase --no-cache | tee "$log"
  total=$(echo "$(date +%s.%N) - $start" | bc)
  base=$(sed -n 's/^image: base .* in \([0-9]*\) s$/\1/p' "$log")
  build=$(sed -n 's/^image: built .* in \([0-9]*\) s$/\1/p' "$log")
  rm -f "$log"
  result image_build_cold "image build from a cold cache (base ${base} s + docker build ${build} s + save)" \
    "$(printf %.0f "$total")" "" "" s info ""
elif ! docker image inspect "$IMAGE" >/dev/null 2>&1; then
  CHL_IMAGE_OUT="$BUILD/image" bash "$ROOT/scripts/image.sh"
fi

unpacked=$(docker image inspect -f '{{.Size}}' "$IMAGE")
compressed=$(docker save "$IMAGE" | gzip -c | wc -c)
mb() { echo "scale=1; $1 / 1000000" | bc; }
result image_unpacked "image size, unpacked (docker's MB)" "$(mb "$unpacked")" \
  "KubeVirt virt-launcher v0.33.0 (kubevirt#4423)" 745 MB faster_ge 1
result image_compressed "image size, docker save, gzipped" "$(mb "$compressed")" "" "" MB info ""

# The launcher's RSS in the pod, from the image lane's own flow (its MESSAGE line).
out=$(CHL_IMAGE=$IMAGE "$BUILD/tests/image/test_image" --success -tc="*as KubeVirt's pod*" 2>&1 || true)
rss_kb=$(echo "$out" | sed -n 's/.*launcher RSS in the container, VM running, pod network: *\([0-9]*\) kB.*/\1/p' | head -n 1)
vmi=$(mktemp --suffix=.yaml)
cat >"$vmi" <<'EOF'
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata: {name: testvm, namespace: default}
spec:
  domain:
    cpu: {cores: 1}
    memory: {guest: 64Mi}
    devices:
      interfaces: [{name: default, masquerade: {}}]
  networks: [{name: default, pod: {}}]
EOF
declared=$("$BUILD/bin/ch-launcher" overhead --vmi "$vmi" --hypervisor cloud-hypervisor | awk '$1 == "launcher" {print $2}')
rm -f "$vmi"
declared_mib=${declared%Mi}
if [ -n "$rss_kb" ]; then
  result image_rss "launcher RSS in the container (uid 107, VM running, pod network)" \
    "$(echo "scale=1; $rss_kb / 1024" | bc)" "declared by ch-launcher overhead (launcher)" "$declared_mib" MiB faster_ge 1
else
  echo "bench_image: the pod flow printed no RSS (test output follows)" >&2
  echo "$out" | tail -n 30 >&2
fi
