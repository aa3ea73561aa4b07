// Setting up one rank of a training job: loading its data and model, meeting
// the other ranks, the shared run directory, and evaluation over all ranks.
// With one process (group null or of size 1) every step is local.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "gradmesh/comm/process_group.h"
#include "gradmesh/data/image_dataset.h"
#include "gradmesh/nn/model.h"
#include "gradmesh/parallel/gradient_reducer.h"
#include "gradmesh/parallel/mesh.h"
#include "gradmesh/parallel/whole_model_view.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/evaluate.h"
#include "gradmesh/train/memory_budget.h"
#include "gradmesh/train/step_plan.h"
#include "gradmesh/train/training_data.h"

namespace gradmesh::train {

// Loads the train and test sets a config names (honouring data.limit_train and
// data.limit_test); a label outside [0, model.classes) is an Error (kFormat).
data::ImageDataset load_train_set(const Config& config);
data::ImageDataset load_test_set(const Config& config);

bool multi_rank(const comm::ProcessGroup* group);

// The device mesh of `world` ranks from parallel.mesh (Error(kConfig) naming
// it when dp x pp x tp is not the world size, or a layout training cannot run).
parallel::MeshShape training_mesh(const ParallelConfig& config, int world);

struct PreparedRank {
  parallel::MeshShape mesh;  // dp x pp x tp; dp = the world with pp = tp = 1
  // What data parallelism (the loader's split, the gradient reduction, ZeRO,
  // evaluation's split) runs over: the world, or the mesh's dp group. Null on one process.
  std::shared_ptr<comm::ProcessGroup> dp_group;
  // tp > 1: the group the model is split over and the whole-model view that
  // checkpoints, saved weights and clipping go through. Null otherwise.
  std::shared_ptr<comm::ProcessGroup> tp_group;
  std::unique_ptr<parallel::WholeModelView> whole;
  // pp > 1: the pp group twice (activations flow down `pp_forward`, their
  // gradients up `pp_backward`, each on its own communication thread), the
  // first and last stages' group for a tied token table (null when untied),
  // and the split of blocks, printed at start.
  std::shared_ptr<comm::ProcessGroup> pp_forward, pp_backward, pp_tied;
  std::string stage_split;
  std::shared_ptr<const TrainingData> data;  // data->test null unless train.eval_every_epoch
  StepPlan steps;
  std::unique_ptr<nn::Model> model;
  // ZeRO stage 3 starting fresh: the values are unwritten, and each rank
  // initialises the pieces it owns (nn::Model::initialize_range) once the
  // shard layout is known; nothing is broadcast.
  bool deferred_init = false;
  MemoryEstimate memory;                    // what this rank will hold (memory_budget.h)
  std::optional<MemoryLimit> memory_limit;  // what the process may hold; none when unlimited
};

// Builds this rank's datasets, step plan and model; a config that would
// train no step, or whose memory estimate exceeds the process's memory limit
// (memory_budget.h), fails here (kConfig), before the model or the optimizer
// is allocated and before any output exists. With
// several ranks it is collective:
// a rank that failed makes every rank fail naming it (no rank waits for it
// until a timeout), configs and parameter layouts must be equal on all ranks
// (Error kConfig naming the ranks and the first difference), and every
// replica gets rank 0's initial parameters.
// With parallel.mesh tp > 1 the mesh's groups are created (collective over
// the world) and the GPT is built split over the tp group; its pieces start
// as the whole model's (nothing is broadcast).
PreparedRank prepare_rank(const Config& config, const std::shared_ptr<comm::ProcessGroup>& group);

// The gradient reducer's options from the [parallel] section. The numbers are
// checked against the schema again where they become integers (a
// ParallelConfig can be filled in code, and casting a double beyond int64 is
// undefined): Error(kConfig) naming the key.
parallel::ReducerOptions reducer_options(const ParallelConfig& config);
// The same with parallel.compression's PowerSGD options (seeded by train.seed).
parallel::ReducerOptions reducer_options(const Config& config);
// parallel.timeout_s as a collective timeout; 0 leaves it unset, so the
// process group's (GRADMESH_COMM_TIMEOUT, default 300 s) applies.
std::optional<comm::Millis> collective_timeout(const ParallelConfig& config);

// Runs `leader_part` on rank 0 and returns its result on every rank
// (collective with several ranks). When it throws, rank 0 rethrows and every
// other rank throws Error(kIo) "<what>: rank 0 failed: <message>", so no
// rank waits for a result that never comes.
std::string on_leader(comm::ProcessGroup* group, const std::function<std::string()>& leader_part,
                      const std::string& what);

// Collective with several ranks: runs `part` on every rank; when it throws
// on some, each of those rethrows its own error and every other rank throws
// Error(kIo) "<what>: rank R failed: <message>" (the lowest failed rank), so
// no rank goes on to a collective the others never reach.
void on_every_rank(comm::ProcessGroup* group, const std::function<void()>& part, const std::string& what);

// A worker that replaces a failed one (in-process recovery): its data and
// model as prepare_rank builds them for `world_size` ranks, without the
// collectives; the state comes from the survivors.
PreparedRank prepare_replacement(const Config& config, int world_size);

// Each rank evaluates its share of the test set and the sums are all-reduced,
// so every rank returns the whole test set's loss and accuracy.
// `pipeline` (pp > 1): the pp group the stages pass activations [rows, T, width] over.
EvalResult evaluate_world(nn::Model& model, const data::SampleSource& test_set, comm::ProcessGroup* group,
                          comm::ProcessGroup* pipeline = nullptr, int64_t width = 0);

}  // namespace gradmesh::train
