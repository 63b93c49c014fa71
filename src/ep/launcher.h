#pragma once
// What the process launcher (mpirun, srun) says about this process, read from its environment before any
// communicator exists: the command line uses it to print an error once rather than once per rank.

namespace moe::ep {

// This process's rank in the launched job (OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK or SLURM_PROCID), 0
// when it was not started by a launcher.
int launcher_rank();

}  // namespace moe::ep
