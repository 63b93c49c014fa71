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
cmake --build "$build" --target moe ep_cuda_ep_tests cuda_tests causal_lm_cuda_tests -j 2
C=${NCCL_CARRY:-.device-carry-nccl}
rm -rf "$C" && mkdir -p "$C/bin" "$C/lib" "$C/mpi/deps" "$C/mpi/usr/bin" "$C/mpi/usr/share"
cp "$build/bin/moe" "$build/bin/ep_cuda_ep_tests" "$build/bin/cuda_tests" "$build/bin/causal_lm_cuda_tests" "$C/bin/"
# Without their symbol tables: the carry and the working tree share a 64 MiB limit.
strip --strip-unneeded "$C"/bin/*
cp -L /usr/lib/x86_64-linux-gnu/libfmt.so.9 "$C/lib/"

ompi=/usr/lib/x86_64-linux-gnu/openmpi
pmix=/usr/lib/x86_64-linux-gnu/pmix2
mkdir -p "$C/mpi$ompi/lib" "$C/mpi$pmix/lib"
cp -L /usr/bin/orterun "$C/mpi/usr/bin/" && ln -s orterun "$C/mpi/usr/bin/mpirun"
cp -L $ompi/lib/*.so* "$C/mpi$ompi/lib/" && cp -rL $ompi/lib/openmpi3 "$C/mpi$ompi/lib/"
cp -L $pmix/lib/libpmix.so.2 "$C/mpi$pmix/lib/" && cp -rL $pmix/lib/pmix "$C/mpi$pmix/lib/"
cp -rL /usr/share/openmpi "$C/mpi/usr/share/"
if [ -d $pmix/share ]; then cp -rL $pmix/share "$C/mpi$pmix/"; fi
# The libraries outside OpenMPI that any of its pieces (or our binaries) load, glibc's own excepted.
for f in "$C"/mpi/usr/bin/orterun "$C"/mpi$ompi/lib/*.so* "$C"/mpi$ompi/lib/openmpi3/*.so "$C"/mpi$pmix/lib/pmix/*.so \
         "$C"/bin/*; do
  ldd "$f" 2>/dev/null | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
  grep -v -E 'openmpi|pmix2|libcuda\.|libcublas|libnccl|libfmt' | while read -r lib; do cp -L "$lib" "$C/mpi/deps/"; done
du -sh "$C"
source scripts/device/lib/common.sh
row carry "$C" "$(du -sh "$C" | cut -f1)"
