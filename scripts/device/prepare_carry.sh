#!/usr/bin/env bash
# Here (no GPU): builds the CUDA targets for sm_90a and gathers what a device run needs into
# .device-carry/ (git-ignored): the binaries and the shared libraries the device image may lack.
# Then: device run with carry [".device-carry"] and command "bash scripts/device/<script>.sh".
# BUILD and CARRY override the build folder and the carry folder (helpers building side by side).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
carry=${CARRY:-.device-carry}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON >/dev/null
cmake --build "$build" --target moe cuda_tests causal_lm_cuda_tests
rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/lib"
cp "$build/bin/moe" "$build/bin/cuda_tests" "$build/bin/causal_lm_cuda_tests" "$carry/bin/"
# The distribution's shared libraries the binaries use (fmt, utf8proc, MPI, ...) that the device image may
# lack; the C/C++ runtime stays the device's own and cuBLAS comes from its CUDA toolkit.
ldd "$build/bin/moe" "$build/bin/cuda_tests" "$build/bin/causal_lm_cuda_tests" | awk '$3 ~ /^\/(usr\/)?lib\/x86_64-linux-gnu\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|ld-linux-x86-64)\.so' |
  while read -r lib; do cp -L "$lib" "$carry/lib/"; done
du -sh "$carry"
