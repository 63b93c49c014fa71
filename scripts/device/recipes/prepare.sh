#!/usr/bin/env bash
# Here (no GPU): build moe and the GPU test binaries for sm_90a and gather them into the carry (.device-carry).
# The carry holds the binaries (stripped), the distribution's shared libraries the device image may lack and
# OpenMPI under mpi/ (lib/gather_mpi.sh: the image has none; lib/mpi.sh sets it up for the recipes that run
# mpirun, e.g. elastic_gpu), as one compressed pack.tar.xz that lib/common.sh unpacks on the device; it is
# git-ignored and travels with a device call (carry [".device-carry"]). BUILD and CARRY override the build
# folder and the carry folder (several builds side by side, e.g. a base build carried as
# .device-carry/base/moe for `ab`).
set -euo pipefail
build=${BUILD:-build}
carry=${CARRY:-.device-carry}
rm -rf "$carry"  # before lib/common.sh, which would unpack an old pack
source scripts/device/lib/common.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON >/dev/null
bins="moe cuda_tests causal_lm_cuda_tests cuda_decoder_tests ep_cuda_eplb_tests"
# shellcheck disable=SC2086
cmake --build "$build" --target $bins
mkdir -p "$carry/bin" "$carry/lib"
for b in $bins; do strip -o "$carry/bin/$b" "$build/bin/$b"; done
# NOTE: the C/C++ runtime stays the device's own and cuBLAS and NCCL come from its CUDA toolkit.
for b in $bins; do ldd "$build/bin/$b"; done |
  awk '$3 ~ /^\/(usr\/)?lib\/x86_64-linux-gnu\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|ld-linux-x86-64)\.so|/lib(cublas|nccl)' |
  while read -r lib; do cp -L "$lib" "$carry/lib/"; done
source scripts/device/lib/gather_mpi.sh
gather_mpi "$carry/mpi"
# NOTE: compressed, since a device call carries at most 64 MiB with the tree; lib/common.sh unpacks it there.
tar cJf "$carry.tar.xz" -C "$carry" bin lib mpi && rm -rf "$carry/bin" "$carry/lib" "$carry/mpi" && mv "$carry.tar.xz" "$carry/pack.tar.xz"
row carry "$carry" "$(du -sh "$carry" | cut -f1)"
