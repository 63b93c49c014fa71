#!/usr/bin/env bash
# Here (no GPU): build every GPU binary (EP tests too) and gather them with OpenMPI into .device-carry-nccl.
# What a multi-GPU device run needs, git-ignored: the binaries, libfmt (and the other distribution libraries
# they load, under lib/), and OpenMPI (the device image has none): mpirun (orterun), libmpi with its MCA
# plugins and help files, PMIx, and the shared libraries they load (lib/mpi.sh links only those the image
# lacks). NCCL itself comes from the device image (CUDA or the nvidia-nccl wheel).
# Then: device call, kind nvidia-h200-x2, carry [".device-carry-nccl"], command
# "bash scripts/device/run.sh ep" (or `check`). BUILD and NCCL_CARRY override the build folder and the carry
# folder (the device recipes read NCCL_CARRY too).
set -euo pipefail
build=${BUILD:-build-nccl}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOE_CUDA=ON >/dev/null
cmake --build "$build" --target moe ep_cuda_ep_tests ep_cuda_eplb_tests cuda_tests causal_lm_cuda_tests -j 2
C=${NCCL_CARRY:-.device-carry-nccl}
rm -rf "$C" && mkdir -p "$C/bin" "$C/lib"
cp "$build/bin/moe" "$build/bin/ep_cuda_ep_tests" "$build/bin/ep_cuda_eplb_tests" "$build/bin/cuda_tests" \
  "$build/bin/causal_lm_cuda_tests" "$C/bin/"
# Without their symbol tables: the carry and the working tree share a 64 MiB limit.
strip --strip-unneeded "$C"/bin/*
cp -L /usr/lib/x86_64-linux-gnu/libfmt.so.9 "$C/lib/"
source scripts/device/lib/gather_mpi.sh
gather_mpi "$C/mpi" "$C"/bin/*
du -sh "$C"
source scripts/device/lib/common.sh
row carry "$C" "$(du -sh "$C" | cut -f1)"
