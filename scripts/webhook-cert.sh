#!/usr/bin/env bash
# The webhook's serving certificate, made with openssl (docs/deploy.md, "Mixed clusters: Cloud
# Hypervisor per VMI"): a CA of its own and a serving certificate for the webhook's Service, whose
# DNS names the API server connects to (<service>.<namespace>.svc) as SANs; then the Secret that
# holds them and the MutatingWebhookConfiguration with the CA as its caBundle.
#   scripts/webhook-cert.sh OUTDIR [--namespace NS] [--service NAME] [--days N]
# Writes OUTDIR/ca.crt, ca.key, tls.crt, tls.key, secret.yaml (Secret chl-webhook-tls, type
# kubernetes.io/tls) and mutatingwebhookconfiguration.yaml (deploy/webhook's, caBundle filled).
# Keep ca.key out of the cluster. Re-run to rotate: `kubectl apply` the new secret.yaml (the
# webhook re-reads the mounted files, no restart) and the new mutatingwebhookconfiguration.yaml.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
usage() { echo "usage: webhook-cert.sh OUTDIR [--namespace NS] [--service NAME] [--days N]" >&2; exit 2; }
[ $# -ge 1 ] || usage
OUT=$1
shift
NS=chl-webhook
SVC=chl-webhook
DAYS=365
while [ $# -gt 0 ]; do
  case $1 in
    --namespace) NS=${2:?--namespace needs a value}; shift 2 ;;
    --service) SVC=${2:?--service needs a value}; shift 2 ;;
    --days) DAYS=${2:?--days needs a value}; shift 2 ;;
    *) usage ;;
  esac
done
command -v openssl >/dev/null || { echo "webhook-cert.sh: openssl is not installed (Debian: openssl)" >&2; exit 1; }
mkdir -p "$OUT"
umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# EC P-256 keys: small and quick handshakes; Go's TLS client (the API server's) accepts them.
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -sha256 -days "$DAYS" \
  -subj "/CN=${SVC}-ca" -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -sha256 \
  -subj "/CN=${SVC}.${NS}.svc" -keyout "$work/tls.key" -out "$work/tls.csr" 2>/dev/null
cat >"$work/ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=DNS:${SVC},DNS:${SVC}.${NS},DNS:${SVC}.${NS}.svc,DNS:${SVC}.${NS}.svc.cluster.local
EXT
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial -sha256 \
  -days "$DAYS" -extfile "$work/ext" -out "$work/tls.crt" 2>/dev/null
openssl verify -CAfile "$work/ca.crt" "$work/tls.crt" >/dev/null

b64() { base64 -w0 <"$1"; }
cat >"$work/secret.yaml" <<YAML
# The webhook's serving certificate (scripts/webhook-cert.sh). Mounted by deploy/webhook/deployment.yaml.
apiVersion: v1
kind: Secret
metadata:
  name: chl-webhook-tls
  namespace: ${NS}
type: kubernetes.io/tls
data:
  tls.crt: $(b64 "$work/tls.crt")
  tls.key: $(b64 "$work/tls.key")
YAML
template=$ROOT/deploy/webhook/mutatingwebhookconfiguration.yaml
grep -q '^      caBundle: ""' "$template" || { echo "webhook-cert.sh: no 'caBundle: \"\"' line in $template" >&2; exit 1; }
sed -e "s|^      caBundle: \"\"|      caBundle: $(b64 "$work/ca.crt")|" \
    -e "s|namespace: chl-webhook$|namespace: ${NS}|" -e "s|name: chl-webhook$|name: ${SVC}|" \
    "$template" >"$work/mutatingwebhookconfiguration.yaml"
for f in ca.crt ca.key tls.crt tls.key secret.yaml mutatingwebhookconfiguration.yaml; do
  mv "$work/$f" "$OUT/$f"
done
chmod 0644 "$OUT/ca.crt" "$OUT/tls.crt" "$OUT/mutatingwebhookconfiguration.yaml"
echo "webhook-cert.sh: $OUT: CA and serving certificate for ${SVC}.${NS}.svc (${DAYS} days), secret.yaml, mutatingwebhookconfiguration.yaml"
