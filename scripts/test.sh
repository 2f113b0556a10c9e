#!/usr/bin/env bash
# The test command: install dependencies, configure, build, run every test.
# CLOUD_HYPERVISOR_BIN=/path/to/cloud-hypervisor runs the Cloud Hypervisor tests against a real
# VMM instead of the project's VMM double.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCHL_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$JOBS"

if [ -n "${CLOUD_HYPERVISOR_BIN:-}" ]; then
  echo "test: Cloud Hypervisor tests drive the real VMM at $CLOUD_HYPERVISOR_BIN"
elif command -v cloud-hypervisor >/dev/null 2>&1; then
  export CLOUD_HYPERVISOR_BIN=$(command -v cloud-hypervisor)
  echo "test: Cloud Hypervisor tests drive the real VMM at $CLOUD_HYPERVISOR_BIN (found on PATH)"
else
  echo "test: Cloud Hypervisor tests drive the VMM double (tests/vmm_double); real-VMM lane skipped: no cloud-hypervisor on PATH and CLOUD_HYPERVISOR_BIN unset"
fi

cd "$BUILD_DIR"
ctest --output-on-failure -j "$JOBS" --timeout 300 </dev/null
