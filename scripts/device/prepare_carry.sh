#!/usr/bin/env bash
# Here (no GPU): builds the CUDA targets for sm_90a and gathers what a device run needs into
# .device-carry/ (git-ignored): the binaries and the one shared library the device image lacks (fmt).
# Then: device run with carry [".device-carry"] and command "bash scripts/device/<script>.sh".
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON >/dev/null
cmake --build build --target moe cuda_tests
rm -rf .device-carry && mkdir -p .device-carry/bin .device-carry/lib
cp build/bin/moe build/bin/cuda_tests .device-carry/bin/
cp -L /usr/lib/x86_64-linux-gnu/libfmt.so.9 .device-carry/lib/
du -sh .device-carry
