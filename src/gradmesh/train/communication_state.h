// What a checkpoint must add for parallel.compression = "powersgd" and
// parallel.local_steps > 1 to resume bit-identically: PowerSGD's warm-start
// Q and every rank's error feedback, and the outer step's momentum. They go
// into the checkpoint as communication.safetensors, written by rank 0:
//   powersgd.q.<param>                 [cols, r]   the same on every rank
//   powersgd.rank<R>.error.<param>     [rows, cols] rank R's own
//   local_sgd.outer_momentum           [parameters] (with outer_momentum > 0)
// A checkpoint without the file (written by a run without them), or with
// another world size (the errors are per rank), resumes with a fresh state,
// and the caller says so.
#pragma once

#include <optional>
#include <string>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/checkpoint/snapshot.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/parallel/local_sgd.h"
#include "gradmesh/parallel/powersgd.h"

namespace gradmesh::train {

inline constexpr const char* kCommunicationFile = "communication.safetensors";

// Collective over `group` (every rank's PowerSGD errors are gathered). Returns
// the file on rank 0 and nothing elsewhere. Either pointer may be null.
std::optional<checkpoint::TensorFile> gather_communication_state(comm::ProcessGroup& group,
                                                                 const parallel::PowerSgdCompressor* powersgd,
                                                                 const parallel::LocalSgd* local);

// Collective: rank 0 reads the file from `loaded` (only rank 0's is used) and
// every rank takes its part. Returns "" when restored, else why the state
// starts fresh (rank 0 names the reason; the decision is the same everywhere).
std::string restore_communication_state(comm::ProcessGroup& group,
                                        const std::optional<checkpoint::LoadedCheckpoint>& loaded,
                                        parallel::PowerSgdCompressor* powersgd, parallel::LocalSgd* local);

}  // namespace gradmesh::train
