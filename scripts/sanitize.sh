#!/usr/bin/env bash
# Sanitizer lanes (issue #9): build the project with a sanitizer in a build dir of its own and
# run the tests.
#   scripts/sanitize.sh asan    ASan + UBSan: ctest -L unit, then -L vmm (VMM double)
#   scripts/sanitize.sh tsan    TSan: ctest -L unit
# Env: BUILD_DIR (default build-asan / build-tsan), JOBS, CC/CXX (default gcc),
#      TARGETS (build only these; default all), CTEST_ARGS (extra ctest arguments, e.g. -R events).
# Exits non-zero if the build or any test fails; failing tests are listed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

lane=${1:-}
case $lane in
  asan)
    flags='-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer'
    labels=(unit vmm)
    # Child processes (the launcher, the VMM double) inherit these.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    ;;
  tsan)
    flags='-fsanitize=thread -fno-omit-frame-pointer'
    labels=(unit)
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
    ;;
  *)
    echo "usage: $0 asan|tsan" >&2
    exit 2
    ;;
esac

BUILD_DIR=${BUILD_DIR:-build-$lane}
JOBS=${JOBS:-$(nproc)}
CC=${CC:-gcc}
CXX=${CXX:-g++}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHL_WERROR=OFF \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
if [ -n "${TARGETS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "$JOBS" --target $TARGETS
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi

failed=()
for label in "${labels[@]}"; do
  echo "=== $lane: ctest -L $label ==="
  start=$SECONDS
  # shellcheck disable=SC2086
  if ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 600 \
      --no-tests=ignore -L "^$label\$" ${CTEST_ARGS:-} </dev/null | tee "$BUILD_DIR/ctest-$label.log"; then
    echo "=== $lane -L $label: passed in $((SECONDS - start)) s ==="
  else
    echo "=== $lane -L $label: FAILED after $((SECONDS - start)) s ==="
    failed+=("$label")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  for label in "${failed[@]}"; do
    sed -n '/The following tests FAILED/,$p' "$BUILD_DIR/ctest-$label.log"
  done
  exit 1
fi
