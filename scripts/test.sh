#!/usr/bin/env bash
# Quick start, step 2: install what is missing, build, and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure --parallel "$(nproc)" --timeout 600
# Hardening (docs/fuzzing.md; MOE_HARDENING=0 skips it): the unit and model tests under ASan+UBSan, the threaded CPU
# paths under TSan, then every fuzzer for MOE_FUZZ_SECONDS each (two at a time).
if [ "${MOE_HARDENING:-1}" != 0 ]; then
  scripts/sanitize.sh
  scripts/fuzz.sh "${MOE_FUZZ_SECONDS:-30}"
fi
