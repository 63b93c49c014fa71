# Sourced by the prepare recipes: `gather_mpi DIR [BINARY...]` copies OpenMPI (the device image has none)
# into DIR in the layout lib/mpi.sh expects there: mpirun (orterun), libmpi with its MCA plugins and help
# files, PMIx, and under DIR/deps the shared libraries that any of them or the BINARYs load (glibc's own, CUDA's,
# NCCL's and libfmt excepted: lib/mpi.sh links in on the device only those the image lacks).
gather_mpi() {
  local M=$1 ompi=/usr/lib/x86_64-linux-gnu/openmpi pmix=/usr/lib/x86_64-linux-gnu/pmix2
  shift
  mkdir -p "$M/deps" "$M/usr/bin" "$M/usr/share" "$M$ompi/lib" "$M$pmix/lib"
  cp -L /usr/bin/orterun "$M/usr/bin/" && ln -s orterun "$M/usr/bin/mpirun"
  cp -L $ompi/lib/*.so* "$M$ompi/lib/" && cp -rL $ompi/lib/openmpi3 "$M$ompi/lib/"
  cp -L $pmix/lib/libpmix.so.2 "$M$pmix/lib/" && cp -rL $pmix/lib/pmix "$M$pmix/lib/"
  cp -rL /usr/share/openmpi "$M/usr/share/"
  if [ -d $pmix/share ]; then cp -rL $pmix/share "$M$pmix/"; fi
  for f in "$M"/usr/bin/orterun "$M"$ompi/lib/*.so* "$M"$ompi/lib/openmpi3/*.so "$M"$pmix/lib/pmix/*.so "$@"; do
    ldd "$f" 2>/dev/null | awk '/=> \// {print $3}'
  done | sort -u | grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so' |
    grep -v -E 'openmpi|pmix2|libcuda\.|libcublas|libnccl|libfmt' | while read -r lib; do cp -L "$lib" "$M/deps/"; done
}
