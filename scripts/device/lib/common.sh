# Sourced by every device recipe: the carried build and the summary helpers.
# CARRY names the carry folder of `run.sh prepare` (default .device-carry). Sets carry, bin (its binaries)
# and out ($OUT, else /tmp), and exports the library path (the carried libraries first, then the device's
# CUDA), MOE_BINARY (the CLI tests run `moe` from there) and MOE_TEST_DATA (the fixtures some tests read).
carry=${CARRY:-.device-carry}
# The carry as `prepare` packs it (and builds packed inside it, e.g. base/ for `ab`): unpacked once, there.
while IFS= read -r pack; do
  [ -d "$(dirname "$pack")/bin" ] || tar xJf "$pack" -C "$(dirname "$pack")"
done < <(find "$carry" -name pack.tar.xz 2>/dev/null)
bin=$carry/bin
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export MOE_BINARY="$PWD/$carry/bin/moe"
export MOE_TEST_DATA="$PWD/tests/data"

# row FIELD... : one row of the summary that run.sh prints last (fields tab-separated, aligned there).
row() {
  local IFS=$'\t'
  echo "$*" >> "${SUMMARY:-/dev/null}"
}
# note TEXT... : a line of the summary as it is (a table header, a markdown table).
note() { echo "$*" >> "${SUMMARY:-/dev/null}"; }
# gtest_counts LOG : "PASSED n, FAILED m" of a GoogleTest log.
gtest_counts() {
  local passed failed
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$1" | grep -oE '[0-9]+$' | tail -1)
  failed=$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$1")
  echo "passed ${passed:-0}, failed $failed"
}
# gpu : the GPU's name, clock and driver, printed and kept in the summary.
gpu() { nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee -a "${SUMMARY:-/dev/null}"; }
