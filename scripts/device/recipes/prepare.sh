#!/usr/bin/env bash
# Here (no GPU): build moe and the GPU test binaries for sm_90a and gather them into the carry (.device-carry).
# The carry holds the binaries and the distribution's shared libraries the device image may lack; it is
# git-ignored and travels with a device call (carry [".device-carry"]). BUILD and CARRY override the build
# folder and the carry folder (several builds side by side, e.g. a base build carried as
# .device-carry/base/moe for `ab`).
set -euo pipefail
build=${BUILD:-build}
carry=${CARRY:-.device-carry}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON >/dev/null
cmake --build "$build" --target moe cuda_tests causal_lm_cuda_tests
rm -rf "$carry" && mkdir -p "$carry/bin" "$carry/lib"
cp "$build/bin/moe" "$build/bin/cuda_tests" "$build/bin/causal_lm_cuda_tests" "$carry/bin/"
# NOTE: the C/C++ runtime stays the device's own and cuBLAS comes from its CUDA toolkit.
ldd "$build/bin/moe" "$build/bin/cuda_tests" "$build/bin/causal_lm_cuda_tests" |
  awk '$3 ~ /^\/(usr\/)?lib\/x86_64-linux-gnu\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|ld-linux-x86-64)\.so' |
  while read -r lib; do cp -L "$lib" "$carry/lib/"; done
du -sh "$carry"
source scripts/device/lib/common.sh
row carry "$carry" "$(du -sh "$carry" | cut -f1)"
