#!/usr/bin/env bash
# Build the libFuzzer targets (fuzz/) with clang + ASan + UBSan and run each for a bounded time.
#   scripts/fuzz.sh [SECONDS]      (default 60 per target)
# Env: BUILD_DIR (default build-fuzz), TARGETS (default: every target), JOBS (build jobs).
# Exit: 0 all ran clean, 1 a target crashed, 77 fuzzing impossible here (no clang, reason printed).
# Seeds are read from fuzz/corpus/<target>/; what libFuzzer finds new goes to
# $BUILD_DIR/fuzz-corpus/<target>/ (never into the repository), crash inputs to
# $BUILD_DIR/fuzz-artifacts/<target>/. Prints executions and coverage per target (libFuzzer's
# final "#N DONE cov: X ft: Y" line) and exits non-zero if any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${1:-60}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
JOBS=${JOBS:-$(nproc)}
TARGETS=${TARGETS:-fuzz_vmi fuzz_events fuzz_qcow2 fuzz_http fuzz_cloud_init fuzz_webhook}
# clang and its fuzzer runtime are needed only here, so they are installed here (not by setup.sh,
# which CI runs on every fresh machine). When they cannot be had, the script says why and exits 77
# (scripts/test.sh reports the fuzz lane as skipped).
cannot_fuzz() {
  echo "fuzz: SKIPPED: $*" >&2
  exit 77
}
install_clang() {
  local SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || cannot_fuzz "clang-14 is not installed and installing it needs root (no sudo)"
    SUDO="sudo -n"
  fi
  echo "fuzz: installing clang-14 and libclang-rt-14-dev (Debian bookworm)"
  export DEBIAN_FRONTEND=noninteractive
  # Fresh machines may have no package lists yet: update once if the first try fails.
  $SUDO apt-get install -y -q -t bookworm --no-install-recommends clang-14 libclang-rt-14-dev </dev/null >/dev/null ||
    { $SUDO apt-get update -q </dev/null >/dev/null &&
      $SUDO apt-get install -y -q -t bookworm --no-install-recommends clang-14 libclang-rt-14-dev </dev/null >/dev/null; } ||
    cannot_fuzz "installing clang-14 and libclang-rt-14-dev with apt-get failed"
}
# libFuzzer's runtime is a separate package (libclang-rt-14-dev): probe that a fuzzer links.
fuzzer_links() {
  local probe
  probe=$(mktemp -d)
  printf '%s\n' 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$probe/p.cpp"
  "$1" -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1
  local rc=$?
  rm -rf "$probe"
  return $rc
}
pick_clang() {
  CXX=${CXX:-$(command -v clang++ || command -v clang++-14 || true)}
  CC=${CC:-$(command -v clang || command -v clang-14 || true)}
}
pick_clang
if [ -z "$CXX" ] || ! fuzzer_links "$CXX"; then
  install_clang
  CXX='' CC=''
  pick_clang
  [ -n "$CXX" ] || cannot_fuzz "clang++ not found after installing clang-14"
  fuzzer_links "$CXX" || cannot_fuzz "$CXX cannot link a libFuzzer target (-fsanitize=fuzzer): libclang-rt-14-dev missing?"
fi
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

SAN='-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-omit-frame-pointer'
# Line tables only: what a sanitizer's stack trace needs (file:line), a fraction of full -g's
# compile time.
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHL_FUZZ=ON "${launcher[@]}" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO='-O2 -gline-tables-only -DNDEBUG' \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O2 -gline-tables-only -DNDEBUG' \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" >/dev/null
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "$JOBS" --target $TARGETS

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

max_len_of() {  # images need room; text inputs stay small
  case $1 in
    fuzz_qcow2) echo 65536 ;;
    fuzz_vmi | fuzz_http | fuzz_webhook) echo 16384 ;;
    *) echo 8192 ;;
  esac
}

summary=()
crashed=()
for t in $TARGETS; do
  bin=$BUILD_DIR/fuzz/$t
  work=$BUILD_DIR/fuzz-corpus/$t
  art=$BUILD_DIR/fuzz-artifacts/$t
  log=$BUILD_DIR/fuzz-logs/$t.log
  mkdir -p "$work" "$art" "$(dirname "$log")"
  echo "=== $t: ${SECS} s ==="
  rc=0
  "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len_of "$t")" \
    -print_final_stats=1 -artifact_prefix="$art/" "$work" "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  runs=$(sed -nE 's/^Done ([0-9]+) runs in ([0-9]+) second.*/\1 runs in \2 s/p' "$log" | tail -1)
  if [ "$rc" -ne 0 ] || grep -qE '^==[0-9]+==ERROR|runtime error:|deadly signal|Test unit written' "$log"; then
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    echo "$t: CRASH (exit $rc) after: $last"
    grep -E 'ERROR|runtime error|SUMMARY|Test unit written|artifact' "$log" | head -8 || true
    crashed+=("$t")
    summary+=("$t | CRASH | ${last} | log: $log")
  else
    echo "$t: ${runs:-?}: ${done_line}"
    summary+=("$t | ok | ${runs:-?} | ${done_line}")
  fi
done

echo
echo "=== fuzz summary (${SECS} s per target) ==="
printf '%s\n' "${summary[@]}"
if [ ${#crashed[@]} -gt 0 ]; then
  echo "crashed: ${crashed[*]} (inputs in $BUILD_DIR/fuzz-artifacts/)" >&2
  exit 1
fi
