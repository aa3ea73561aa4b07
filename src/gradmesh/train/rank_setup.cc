#include "gradmesh/train/rank_setup.h"

#include <functional>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/core/error.h"
#include "gradmesh/data/sample_order.h"
#include "gradmesh/parallel/mesh.h"
#include "gradmesh/parallel/tensor_parallel.h"
#include "gradmesh/parallel/rank_agreement.h"
#include "gradmesh/train/config_schema.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/run_dir.h"
#include "gradmesh/train/step_plan.h"

namespace gradmesh::train {
namespace {

data::ImageDataset load_set(const Config& config, const std::string& images, const std::string& labels,
                            int64_t limit) {
  const DataConfig& c = config.data;
  const std::filesystem::path dir = resolved_data_dir(c);
  data::Normalization norm{static_cast<float>(c.scale), static_cast<float>(c.mean), static_cast<float>(c.std)};
  const data::LabelSpace label_space{static_cast<int32_t>(config.model.classes), "model.classes"};
  data::ImageDataset set =
      data::load_image_dataset((dir / images).string(), (dir / labels).string(), norm, label_space);
  if (limit > 0 && limit < set.count) {
    set.count = limit;
    set.pixels.resize(static_cast<size_t>(limit * set.sample_numel()));
    set.labels.resize(static_cast<size_t>(limit));
  }
  return set;
}

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

// What a split model (tp or pp > 1) cannot be combined with yet.
void check_mesh_supported(const Config& config, const parallel::MeshShape& mesh) {
  if (mesh.pp == 1 && mesh.tp == 1) return;
  const std::string layout = "pp = " + std::to_string(mesh.pp) + ", tp = " + std::to_string(mesh.tp);
  const char* what = mesh.pp > 1 ? "pipeline stages" : "tensor parallelism";
  auto refuse = [&](const std::string& key, const std::string& why) {
    throw_error(ErrorKind::kConfig, key,
                why + " cannot be combined with " + what + " (parallel.mesh " + layout + ") yet (docs/model-parallel.md)");
  };
  if (config.model.kind != "gpt") refuse("model.kind", "\"" + config.model.kind + "\" (only the GPT splits its layers)");
  // ZeRO shards over the dp groups as it does for a whole model; stage 3
  // gathers parameter units, which a pipeline stage does not declare yet.
  if (config.parallel.zero == 3 && mesh.pp > 1) refuse("parallel.zero", "ZeRO stage 3");
  if (config.parallel.straggler != "none") refuse("parallel.straggler", "rebalancing");
  if (config.elastic.recovery == "in-process") refuse("elastic.recovery", "in-process recovery");
  if (mesh.tp > 1 && config.parallel.comm_dtype != "f32") refuse("parallel.comm_dtype", "bf16 gradients");
  if (mesh.pp == 1) return;
  // A stage's dropout masks would be keyed by its own layers, not the whole model's.
  if (config.model.dropout > 0) refuse("model.dropout", "dropout");
  if (config.train.accum_steps != 1)
    refuse("train.accum_steps", "gradient accumulation (pipeline stages accumulate over parallel.micro_batches)");
  if (config.model.n_layer < mesh.pp)
    throw_error(ErrorKind::kConfig, "parallel.mesh.pp",
                std::to_string(mesh.pp) + " stages need at least as many blocks, model.n_layer = " +
                    std::to_string(config.model.n_layer));
  if (config.train.batch_size / mesh.dp < config.parallel.micro_batches)
    throw_error(ErrorKind::kConfig, "parallel.micro_batches",
                std::to_string(config.parallel.micro_batches) + " micro-batches need as many samples on every " +
                    "data-parallel rank; train.batch_size = " + std::to_string(config.train.batch_size) + " over dp = " +
                    std::to_string(mesh.dp) + " leaves fewer");
}

void build_rank_model(const Config& config, PreparedRank& p, std::shared_ptr<nn::TensorSplit> split,
                      const nn::GptStage& stage = {}) {
  const TrainConfig& tc = config.train;
  p.model = build_model(config.model, p.data->geometry, tc.seed,
                        p.deferred_init ? nn::ParameterInit::kDeferred : nn::ParameterInit::kNow, std::move(split),
                        stage);
  if (!tc.init_from.empty()) {
    checkpoint::SafetensorsFile file = checkpoint::read_safetensors(tc.init_from);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (auto& t : file.tensors) tensors.emplace_back(t.name, t.tensor);
    p.model->load_parameters(tensors, tc.init_from, /*others_allowed=*/stage.count > 1);  // a split model takes its pieces
  }
}

// `world` ranks; the model is built unless `build_model_now` is false (a
// split model needs its groups first).
PreparedRank prepare(const Config& config, int world_size, bool build_model_now = true) {
  const TrainConfig& tc = config.train;
  const parallel::MeshShape mesh = training_mesh(config.parallel, world_size);
  check_mesh_supported(config, mesh);
  const int world = mesh.dp;  // the replicas that split each global batch
  if (tc.batch_size < tc.accum_steps)
    throw_error(ErrorKind::kConfig, "train.batch_size",
                std::to_string(tc.batch_size) + " is smaller than train.accum_steps = " + std::to_string(tc.accum_steps));
  if (tc.batch_size < world)
    throw_error(ErrorKind::kConfig, "train.batch_size",
                std::to_string(tc.batch_size) + " is smaller than the world size " + std::to_string(world) +
                    ": every rank needs at least one sample of each global batch; raise train.batch_size or start "
                    "fewer workers");
  PreparedRank p;
  p.mesh = mesh;
  p.data = load_training_data(config, tc.eval_every_epoch);
  p.steps = plan_steps(config, p.data->train->count());
  // The rank that holds the most: its stage's blocks, its pieces of split layers
  // (bench/model_parallel.py measures the peaks beside the estimate).
  p.memory = estimate_rank_memory(config, p.data->geometry, mesh);
  p.memory_limit = process_memory_limit();
  check_memory_fits(p.memory, p.memory_limit, local_rank_count());
  // A split model initialises its pieces whole on every rank (tp already divides them).
  p.deferred_init = world > 1 && config.parallel.zero == 3 && tc.init_from.empty() && mesh.pp == 1 && mesh.tp == 1;
  if (build_model_now) build_rank_model(config, p, nullptr);
  return p;
}

// `value` (of schema key `key`) times `unit`, as an integer. The schema's
// upper bound keeps the product far inside int64.
int64_t checked_integer(const char* key, double value, double unit) {
  const KeySpec* spec = find_key(key);
  GRADMESH_CHECK(spec != nullptr, key);
  int64_t unused = -1;
  const std::string problem = check_value(*spec, KeyValue(value), &unused);
  if (!problem.empty()) throw_error(ErrorKind::kConfig, key, problem);
  return static_cast<int64_t>(value * unit);
}

// The config as the ranks must agree on it; directories may differ between machines.
std::string agreement_text(Config c) {
  c.data.dir.clear();
  c.output.dir.clear();
  return config_to_toml(c);
}

}  // namespace

parallel::MeshShape training_mesh(const ParallelConfig& c, int world) {
  return parallel::resolve_mesh_shape(static_cast<int>(c.mesh_dp), static_cast<int>(c.mesh_pp),
                                      static_cast<int>(c.mesh_tp), world, "parallel.mesh");
}

bool multi_rank(const comm::ProcessGroup* group) { return group && group->size() > 1; }

data::ImageDataset load_train_set(const Config& config) {
  const DataConfig& c = config.data;
  return load_set(config, c.train_images, c.train_labels, c.limit_train);
}

data::ImageDataset load_test_set(const Config& config) {
  const DataConfig& c = config.data;
  return load_set(config, c.test_images, c.test_labels, c.limit_test);
}

PreparedRank prepare_rank(const Config& config, const std::shared_ptr<comm::ProcessGroup>& group) {
  if (!multi_rank(group.get())) return prepare(config, 1);
  std::exception_ptr failure;
  PreparedRank p;
  bool split = false;
  try {
    const parallel::MeshShape mesh = training_mesh(config.parallel, group->size());
    split = mesh.tp > 1 || mesh.pp > 1;
    p = prepare(config, group->size(), /*build_model_now=*/!split);
  } catch (const std::exception&) {
    failure = std::current_exception();
  }
  parallel::StartState state;
  if (failure) state.error = message_of(failure);
  state.config_text = agreement_text(config);
  // A split model's layout differs between tp ranks by design; the configs still must agree.
  if (p.model) state.layout = parallel::parameter_layout(*p.model);
  try {
    parallel::check_start_agreement(*group, state);
  } catch (...) {
    if (failure) std::rethrow_exception(failure);  // this rank's own error says more than "rank r failed"
    throw;
  }
  if (!split) {
    p.dp_group = group;
    // Deferred values are the same on every rank by construction (counter-based init).
    if (!p.deferred_init) parallel::broadcast_parameters(*group, *p.model);
    return p;
  }
  const parallel::MeshGroups groups = parallel::create_mesh_groups(group, parallel::DeviceMesh(p.mesh));
  p.dp_group = groups.dp;
  // Every rank builds its pieces from the seed: identical across the dp replicas without a broadcast.
  std::shared_ptr<parallel::GroupTensorSplit> tensor_split;
  if (p.mesh.tp > 1) {
    p.tp_group = groups.tp;
    tensor_split = std::make_shared<parallel::GroupTensorSplit>(groups.tp);
  }
  if (p.mesh.pp == 1) {
    on_every_rank(group.get(), [&] { build_rank_model(config, p, tensor_split); }, "building the tensor-parallel model");
    p.whole = std::make_unique<parallel::WholeModelView>(*p.model, groups.model);
    return p;
  }
  // Pipeline stages: this rank's blocks, the pp group twice (activations down
  // one, their gradients up the other, each on its own communication thread,
  // so a send blocked one way never holds up a receive the other way), and
  // the first and last stages' group for a tied token table.
  const int stage = groups.pp->rank(), stages = groups.pp->size();
  const std::vector<parallel::StageBlocks> split_blocks = gpt_stage_split(config.model, p.data->geometry, stages);
  p.stage_split = parallel::describe_stages(split_blocks);
  // Groups of their own: with dp = 1 the pp group is the world, whose other
  // collectives (votes, phase times) must not interleave with the stages' messages.
  std::vector<int> all(static_cast<size_t>(stages));
  for (int r = 0; r < stages; ++r) all[static_cast<size_t>(r)] = r;
  p.pp_forward = groups.pp->new_group(all);
  p.pp_backward = groups.pp->new_group(all);
  if (config.model.tie_weights) p.pp_tied = groups.pp->new_group({0, stages - 1});
  const nn::GptStage mine{stage, stages, split_blocks[static_cast<size_t>(stage)].begin,
                          split_blocks[static_cast<size_t>(stage)].end};
  on_every_rank(group.get(), [&] { build_rank_model(config, p, tensor_split, mine); }, "building the pipeline stage");
  p.whole = std::make_unique<parallel::WholeModelView>(*p.model, groups.model,
                                                       gpt_whole_parameters(config.model, p.data->geometry));
  return p;
}

parallel::ReducerOptions reducer_options(const ParallelConfig& c) {
  parallel::ReducerOptions o;
  o.bucket_bytes = std::max<int64_t>(1, checked_integer("parallel.bucket_mb", c.bucket_mb, 1024.0 * 1024.0));
  o.first_bucket_bytes =
      std::max<int64_t>(1, checked_integer("parallel.first_bucket_mb", c.first_bucket_mb, 1024.0 * 1024.0));
  o.bf16 = c.comm_dtype == "bf16";
  o.overlap = c.overlap;
  o.timeout = collective_timeout(c);
  return o;
}

parallel::ReducerOptions reducer_options(const Config& config) {
  parallel::ReducerOptions o = reducer_options(config.parallel);
  if (config.parallel.compression == "powersgd") {
    o.powersgd = parallel::PowerSgdOptions{};
    o.powersgd->rank = static_cast<int>(config.parallel.powersgd_rank);
    o.powersgd->seed = config.train.seed;
    o.powersgd_start_step = config.parallel.powersgd_start_step;
  }
  return o;
}

std::optional<comm::Millis> collective_timeout(const ParallelConfig& c) {
  const int64_t ms = checked_integer("parallel.timeout_s", c.timeout_s, 1000.0);
  if (ms == 0) return std::nullopt;
  return comm::Millis(ms);
}

std::string on_leader(comm::ProcessGroup* group, const std::function<std::string()>& leader_part,
                      const std::string& what) {
  const bool multi = multi_rank(group);
  const bool leader = !group || group->rank() == 0;
  std::string result;
  std::exception_ptr failure;
  if (leader) {
    try {
      result = leader_part();
    } catch (const std::exception&) {
      if (!multi) throw;
      failure = std::current_exception();
    }
  }
  if (!multi) return result;
  // A leading NUL never starts a result (paths, flags), so it marks a failure message.
  const std::string shared =
      parallel::broadcast_string(*group, failure ? std::string(1, '\0') + message_of(failure) : result);
  if (failure) std::rethrow_exception(failure);
  if (!shared.empty() && shared[0] == '\0')
    throw_error(ErrorKind::kIo, what, "rank 0 failed: " + shared.substr(1));
  return shared;
}

void on_every_rank(comm::ProcessGroup* group, const std::function<void()>& part, const std::string& what) {
  std::exception_ptr failure;
  std::string message;
  try {
    part();
  } catch (const std::exception&) {
    failure = std::current_exception();
    message = message_of(failure);
  }
  if (!multi_rank(group)) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  const std::vector<std::string> messages = parallel::allgather_strings(*group, message);
  if (failure) std::rethrow_exception(failure);
  for (size_t r = 0; r < messages.size(); ++r)
    if (!messages[r].empty())
      throw_error(ErrorKind::kIo, what, "rank " + std::to_string(r) + " failed: " + messages[r]);
}

PreparedRank prepare_replacement(const Config& config, int world_size) { return prepare(config, world_size); }  // tp = 1: in-process recovery refuses tp > 1

EvalResult evaluate_world(nn::Model& model, const data::SampleSource& test_set, comm::ProcessGroup* group,
                          comm::ProcessGroup* pipeline, int64_t width) {
  const auto [begin, end] = multi_rank(group) ? data::rank_slice(test_set.count(), group->rank(), group->size())
                                              : std::pair<int64_t, int64_t>{0, test_set.count()};
  EvalResult r = pipeline ? evaluate_pipeline_rows(model, test_set, begin, end, *pipeline, width)
                          : evaluate_rows(model, test_set, begin, end);
  if (!multi_rank(group)) return r;
  Tensor sums = Tensor::from_vector({3}, {static_cast<float>(r.loss_sum), static_cast<float>(r.correct),
                                          static_cast<float>(r.samples)});
  auto work = group->allreduce(sums);
  work->wait_or_throw();
  r.loss_sum = sums.data()[0];
  r.correct = static_cast<int64_t>(std::lround(sums.data()[1]));
  r.samples = static_cast<int64_t>(std::lround(sums.data()[2]));
  r.loss = r.samples ? r.loss_sum / static_cast<double>(r.samples) : 0;
  r.accuracy = r.samples ? static_cast<double>(r.correct) / static_cast<double>(r.samples) : 0;
  return r;
}

}  // namespace gradmesh::train
