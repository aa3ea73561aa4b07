// The `mpi` backend: Open MPI's collectives, for jobs started by mpirun/srun.
//
// MPI chooses its own transports (shared memory inside a host, TCP or a fast
// fabric between hosts), so this backend is a thin, ordered, time-limited
// wrapper: each operation is a non-blocking MPI call polled until done or
// until its deadline. MPI cannot say which ranks are missing, so on a timeout
// the ranks that arrived tell each other so over a private communicator, and
// the error names the operation, its sequence number and the ranks that did
// not report (census() in the .cc).
//
// BF16 travels as 16 bits (MPI_UINT16_T) and is reduced by our own MPI
// operations in float32, rounded to BF16 each time MPI combines two partial
// results (bf16_ops.h): once for 2 ranks, at most n-1 times for n. avg is the
// sum, then divided by n in float32 and rounded once more.
#pragma once

#include <memory>

#include "gradmesh/comm/process_group.h"

namespace gradmesh::comm {

// True when this process was started by an MPI launcher (Open MPI, PMI, PMIx).
bool launched_by_mpi();

// Initialises MPI on first use (thread level MPI_THREAD_MULTIPLE or SERIALIZED)
// and returns the group of all MPI ranks. REQUIRES: launched_by_mpi().
std::shared_ptr<ProcessGroup> make_mpi_process_group(Millis timeout);

}  // namespace gradmesh::comm
