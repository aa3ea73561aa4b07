// Where a run writes and what it starts from: a fresh run directory, or an
// existing one continued from a checkpoint.
//
//   --resume auto   the newest checkpoint that verifies, of this run: the run
//                   directory named by output.run_id, else by the launch's run
//                   id (GRADMESH_RUN_ID), else the most recent run under
//                   output.dir whose checkpoint has this config's training
//                   hash; none found = a fresh start at step 0 (said so).
//   --resume PATH   that checkpoint (a step-<N> directory, a checkpoints
//                   directory or a run directory); it must verify.
//   restarted       a worker of generation > 0 under gradmesh launch resumes
//                   as with auto, in the same run directory.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gradmesh/checkpoint/checkpoint_reader.h"
#include "gradmesh/train/config.h"

namespace gradmesh::train {

struct RunOptions {
  std::string resume;  // "", "auto" or a path
  int generation = 0;  // GRADMESH_GENERATION of a launched worker
  bool replacement = false;  // GRADMESH_REPLACEMENT: joins survivors that hold the state (in-process recovery)
};

struct RunPlan {
  std::string parent, id;  // the run directory is <parent>/<id>
  bool reuse = false;      // the directory may exist already
  std::string checkpoints_dir;
  std::optional<checkpoint::LoadedCheckpoint> checkpoint;
  std::vector<std::string> notes;  // lines for the user: what was chosen and why
};

// Decides on rank 0; reads checkpoints but writes nothing. A --resume PATH
// that does not verify, or checkpoints of which none verifies, is Error(kFormat).
RunPlan plan_run(const Config& config, const RunOptions& options);

// Whether a note of the plan is a warning (a skipped or refused checkpoint, a
// changed config) rather than information (where the run resumes).
bool is_warning_note(const std::string& note);

// <run>/checkpoints unless checkpoint.dir says otherwise.
std::string checkpoints_dir_of(const Config& config, const std::string& run_dir);

}  // namespace gradmesh::train
