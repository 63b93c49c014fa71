# Sourced by the device recipes that run mpirun: the carried OpenMPI (lib/gather_mpi.sh, from `run.sh
# prepare_nccl` or `run.sh prepare`) relocated under .device-carry-nccl/mpi, its libraries linked in only
# where the image lacks them, set up for one host as root, with NVLink multicast kept off. Sets MPIRUN.
# NCCL_CARRY overrides the carry folder (.device-carry for prepare's, sourced after lib/common.sh unpacked it).
C="$PWD/${NCCL_CARRY:-.device-carry-nccl}"
M="$C/mpi"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
rm -rf /tmp/moe-mpi-lib && mkdir -p /tmp/moe-mpi-lib
# OpenMPI's own libraries always come from the carry (they must match its mpirun and plugins, whatever
# OpenMPI the image may hold); the others only where the image lacks them (MOE_MPI_LINK_ALL=1: all).
for f in "$M"/deps/*; do
  n=$(basename "$f")
  case "$n" in
    libmpi*|libopen-*|libmca_common*|liboshmem*|libpmix*) ln -sf "$f" /tmp/moe-mpi-lib/"$n" ;;
    *) [ -z "${MOE_MPI_LINK_ALL:-}" ] && ldconfig -p | grep -qF "$n (" || ln -sf "$f" /tmp/moe-mpi-lib/"$n" ;;
  esac
done
# NCCL from the image: the CUDA toolkit's, else the nvidia-nccl wheel's.
NCCL_DIR=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
  if [ -e "$d/libnccl.so.2" ]; then NCCL_DIR=$d; break; fi
done
if [ -z "$NCCL_DIR" ]; then
  NCCL_DIR=$(dirname "$(find / -xdev -name 'libnccl.so.2' -path '*nvidia*' 2>/dev/null | head -1)")
fi
export LD_LIBRARY_PATH="$C/lib:/tmp/moe-mpi-lib:$M/usr/lib/x86_64-linux-gnu/openmpi/lib:$NCCL_DIR:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="$M/usr/bin:$PATH"
export OPAL_PREFIX="$M/usr" PMIX_PREFIX="$M/usr/lib/x86_64-linux-gnu/pmix2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One host, no ssh: the isolated launcher; shared memory between the ranks (no single-copy: containers
# often refuse cross-process memory access).
export OMPI_MCA_plm=isolated OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mca_base_component_show_load_errors=0
MPIRUN="$M/usr/bin/mpirun --allow-run-as-root --bind-to none"
echo "lib/mpi.sh: NCCL from $NCCL_DIR; carried libraries linked: $(ls /tmp/moe-mpi-lib | wc -l)"
