#!/usr/bin/env bash
# Lint a Dockerfile without a Docker engine. Debian bookworm has no hadolint package, so this
# checks the rules of hadolint's that matter for this image, plus ours:
#   DL3006/DL3007  every FROM names a tag, never :latest (FROM ${ARG}: the global ARG's default)
#   DL3020         COPY, never ADD
#   DL3008-ours    apt-get install has -y, --no-install-recommends and -t bookworm
#   DL3009         an apt-get update's RUN also removes /var/lib/apt/lists
#   DL4006         a RUN with a pipe follows SHELL [... "-o", "pipefail" ...]
#   DL3002         the final stage's last USER is not root
#   DL3025         ENTRYPOINT in exec (JSON) form
#   ours           every file fetched with curl/wget is checked with sha256sum -c in the same RUN
# Usage: check-dockerfile.sh [Dockerfile]   exit 0 clean, 1 findings (one line each), 2 usage.
set -euo pipefail
file=${1:-Dockerfile}
[ -r "$file" ] || { echo "check-dockerfile: cannot read $file" >&2; exit 2; }

# Join continuation lines, keep the first line number of each instruction, drop comments.
awk '
  /^[[:space:]]*#/ && !cont { next }
  {
    line = $0
    if (!cont) { start = NR; buf = "" }
    if (sub(/\\[[:space:]]*$/, "", line)) { buf = buf line " "; cont = 1; next }
    buf = buf line; cont = 0
    if (buf ~ /^[[:space:]]*$/) next
    print start "\t" buf
  }' "$file" | awk -F'\t' -v file="$file" '
  function finding(n, rule, msg) { printf "%s:%d: %s %s\n", file, n, rule, msg; bad = 1 }
  {
    n = $1; ins = $2; sub(/^[[:space:]]+/, "", ins)
    split(ins, w, /[[:space:]]+/); op = toupper(w[1])
    if (op == "ARG" && !stage) {  # a global ARG: its default stands in for ${NAME} in FROM
      split(w[2], kv, "="); globals[kv[1]] = (index(w[2], "=") ? substr(w[2], index(w[2], "=") + 1) : "")
    } else if (op == "FROM") {
      stage++; user = ""; image = w[2]
      if (match(image, /^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$/)) {
        name = image; gsub(/[${}]/, "", name)
        if (globals[name] == "") finding(n, "DL3006", "FROM " image ": the ARG has no default with a tag")
        image = globals[name]
      }
      if (image != "" && image !~ /:/ && image !~ /@sha256:/ && !(image in stages)) finding(n, "DL3006", "FROM " image " has no tag")
      if (image ~ /:latest$/) finding(n, "DL3007", "FROM " image " uses :latest")
      for (i = 3; i <= length(w); i++) if (toupper(w[i]) == "AS") stages[w[i + 1]] = 1
      pipefail = 0
    } else if (op == "ADD") {
      finding(n, "DL3020", "use COPY instead of ADD")
    } else if (op == "SHELL") {
      pipefail = (ins ~ /pipefail/)
    } else if (op == "USER") {
      user = w[2]
    } else if (op == "ENTRYPOINT") {
      if (ins !~ /^ENTRYPOINT[[:space:]]*\[/) finding(n, "DL3025", "ENTRYPOINT is not in exec (JSON) form")
      entry = 1
    } else if (op == "RUN") {
      if (ins ~ /apt-get[[:space:]]+(-[^[:space:]]+[[:space:]]+)*install/) {
        if (ins !~ /[[:space:]]-y([[:space:]]|$)/) finding(n, "DL3014", "apt-get install without -y")
        if (ins !~ /--no-install-recommends/) finding(n, "DL3015", "apt-get install without --no-install-recommends")
        if (ins !~ /-t[[:space:]]+bookworm/) finding(n, "CHL001", "apt-get install without -t bookworm (packages come from bookworm only)")
      }
      if (ins ~ /apt-get[[:space:]]+update/ && ins !~ /rm -rf \/var\/lib\/apt\/lists/) finding(n, "DL3009", "apt-get update without removing /var/lib/apt/lists")
      if (ins ~ /[^|]\|[^|]/ && !pipefail) finding(n, "DL4006", "RUN with a pipe without SHELL -o pipefail")
      if (ins ~ /(curl|wget)[[:space:]]+-/ && ins !~ /sha256sum[[:space:]]+(-c|--check)/) finding(n, "CHL002", "downloads without a sha256sum -c check")
    }
  }
  END {
    if (user == "" || user == "root" || user == "0" || user ~ /^0:/) finding(NR, "DL3002", "the final stage runs as root (last USER: " (user == "" ? "none" : user) ")")
    if (!entry) finding(NR, "CHL003", "no ENTRYPOINT")
    exit bad
  }'
