# Sourced by the device scripts that run a carry of scripts/device/prepare_carry.sh. CARRY names it
# (default .device-carry). Sets carry, bin (its binaries) and out ($OUT, else /tmp), and exports the library
# path (the carried libraries first, then the device's CUDA), MOE_BINARY (the tests run `moe` from there) and
# MOE_TEST_DATA (the fixtures some tests read).
carry=${CARRY:-.device-carry}
bin=$carry/bin
out=${OUT:-/tmp}
export LD_LIBRARY_PATH="$PWD/$carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export MOE_BINARY="$PWD/$carry/bin/moe"
export MOE_TEST_DATA="$PWD/tests/data"
