#include "gradmesh/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "gradmesh/autograd/ops.h"
#include "gradmesh/checkpoint/safetensors.h"
#include "gradmesh/config.h"
#include "gradmesh/core/clock.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/log.h"
#include "gradmesh/data/batch_loader.h"
#include "gradmesh/kernels/gemm.h"
#include "gradmesh/obs/jsonl_writer.h"
#include "gradmesh/obs/progress.h"
#include "gradmesh/optim/clip.h"
#include "gradmesh/optim/optimizer.h"
#include "gradmesh/optim/schedule.h"
#include "gradmesh/train/evaluate.h"
#include "gradmesh/train/model_factory.h"
#include "gradmesh/train/run_dir.h"

namespace gradmesh::train {
namespace {

data::ImageDataset load_set(const DataConfig& c, const std::string& images, const std::string& labels, int64_t limit) {
  const std::filesystem::path dir = resolved_data_dir(c);
  data::Normalization norm{static_cast<float>(c.scale), static_cast<float>(c.mean), static_cast<float>(c.std)};
  data::ImageDataset set = data::load_image_dataset((dir / images).string(), (dir / labels).string(), norm);
  if (limit > 0 && limit < set.count) {
    set.count = limit;
    set.pixels.resize(static_cast<size_t>(limit * set.sample_numel()));
    set.labels.resize(static_cast<size_t>(limit));
  }
  return set;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimConfig& c, int64_t num_params) {
  std::vector<optim::ParamGroup> groups{{0, num_params, static_cast<float>(c.weight_decay)}};
  if (c.name == "adamw")
    return optim::make_adamw(groups, {static_cast<float>(c.beta1), static_cast<float>(c.beta2), static_cast<float>(c.eps)});
  return optim::make_sgd(groups, {static_cast<float>(c.momentum), static_cast<float>(c.dampening), c.nesterov});
}

void save_weights(nn::Model& model, const std::string& path, const Config& config, int64_t step, int64_t epoch) {
  std::vector<checkpoint::NamedTensor> tensors;
  for (auto& [name, t] : model.named_parameters()) tensors.push_back({name, t});
  const std::map<std::string, std::string> metadata{
      {"format", "pt"}, {"producer", "gradmesh " GRADMESH_VERSION}, {"model.kind", config.model.kind},
      {"step", std::to_string(step)}, {"epoch", std::to_string(epoch)}};
  checkpoint::write_safetensors(path, tensors, metadata,
                                config.output.weights_dtype == "BF16" ? DType::kBF16 : DType::kF32);
}

// One optimizer step over a global batch: accum micro-batches, clip, update. Returns the batch loss.
double train_step(nn::Model& model, optim::Optimizer& optimizer, const data::Batch& batch, const Config& config,
                  float lr) {
  const int64_t rows = batch.images.dim(0), sample = batch.images.numel() / std::max<int64_t>(rows, 1);
  const int64_t micro = config.train.accum_steps;
  const auto denominator = static_cast<float>(batch.global_batch_len);
  Shape shape = batch.images.shape();
  double loss = 0;
  model.zero_grad();
  for (int64_t m = 0; m < micro; ++m) {
    const int64_t lo = rows * m / micro, hi = rows * (m + 1) / micro;
    if (hi == lo) continue;
    shape[0] = hi - lo;
    nn::forward_context().first_sample = lo;
    autograd::Variable x(batch.images.slice_flat(lo * sample, shape));
    const std::vector<int32_t> labels(batch.labels.begin() + lo, batch.labels.begin() + hi);
    autograd::Variable out = autograd::cross_entropy(model.forward(x), labels, denominator);
    loss += out.value().item();
    model.backward(out);
  }
  float* grads = model.flat_grads().data();
  if (config.optim.clip_grad_norm > 0)
    optim::clip_grad_norm(grads, model.num_parameters(), static_cast<float>(config.optim.clip_grad_norm));
  optimizer.step(model.flat_params().data(), grads, lr);
  return loss;
}

}  // namespace

data::ImageDataset load_train_set(const DataConfig& c) {
  return load_set(c, c.train_images, c.train_labels, c.limit_train);
}

data::ImageDataset load_test_set(const DataConfig& c) { return load_set(c, c.test_images, c.test_labels, c.limit_test); }

TrainSummary run_training(const Config& config, std::FILE* progress_stream) {
  const TrainConfig& tc = config.train;
  kernels::set_num_threads(static_cast<int>(tc.threads));
  const data::ImageDataset train_set = load_train_set(config.data);
  const data::ImageDataset test_set = tc.eval_every_epoch ? load_test_set(config.data) : data::ImageDataset{};
  if (tc.batch_size < tc.accum_steps)
    throw_error(ErrorKind::kConfig, "train.batch_size",
                std::to_string(tc.batch_size) + " is smaller than train.accum_steps = " + std::to_string(tc.accum_steps));

  const InputGeometry geometry{train_set.channels, train_set.height, train_set.width,
                               std::max(train_set.num_classes, test_set.num_classes)};
  std::unique_ptr<nn::Model> model = build_model(config.model, geometry, tc.seed);
  if (!tc.init_from.empty()) {
    checkpoint::SafetensorsFile file = checkpoint::read_safetensors(tc.init_from);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (auto& t : file.tensors) tensors.emplace_back(t.name, t.tensor);
    model->load_parameters(tensors, tc.init_from);
  }
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(config.optim, model->num_parameters());

  data::BatchLoaderOptions loader_options;
  loader_options.global_batch = tc.batch_size;
  loader_options.seed = tc.seed;
  loader_options.shuffle = config.data.shuffle;
  loader_options.drop_last = config.data.drop_last;
  loader_options.prefetch = static_cast<int>(config.data.prefetch);
  data::BatchLoader loader(train_set, loader_options);
  const int64_t steps_per_epoch = loader.steps_per_epoch();
  int64_t total_steps = steps_per_epoch * tc.epochs;
  if (tc.max_steps > 0) total_steps = std::min(total_steps, tc.max_steps);

  optim::ScheduleOptions schedule{config.schedule.kind, config.schedule.warmup_steps, config.schedule.step_size,
                                  static_cast<float>(config.schedule.gamma), total_steps,
                                  static_cast<float>(config.schedule.min_lr)};
  const auto base_lr = static_cast<float>(config.optim.lr);
  optim::validate_schedule(schedule, base_lr);

  TrainSummary summary;
  summary.run_dir = create_run_dir(config.output.dir, config.output.run_id.empty() ? new_run_id() : config.output.run_id);
  std::ofstream(summary.run_dir + "/config.toml") << config_to_toml(config);
  obs::JsonlWriter metrics(summary.run_dir + "/metrics.jsonl");
  obs::Progress progress(obs::progress_mode_from_env(progress_stream), progress_stream, tc.log_every);
  progress.message("run " + summary.run_dir + ": " + config.model.kind + " with " +
                   std::to_string(model->num_parameters()) + " parameters, " + std::to_string(train_set.count) +
                   " training samples, " + std::to_string(total_steps) + " steps");

  const double start = now_seconds();
  double excluded = 0;  // evaluation time, kept out of the throughput figures
  const uint64_t flops_start = kernels::gemm_flops();
  uint64_t flops_excluded = 0;
  int64_t step = 0, window_samples = 0;
  double window_loss = 0, window_start = start;
  int64_t window_steps = 0;
  nn::forward_context().seed = tc.seed;
  for (int64_t epoch = 0; epoch < tc.epochs && step < total_steps; ++epoch) {
    loader.start_epoch(epoch);
    data::Batch batch;
    int64_t step_in_epoch = 0;
    while (step < total_steps && loader.next(batch)) {
      const float lr = optim::lr_at(schedule, base_lr, step);
      nn::forward_context().step = static_cast<uint64_t>(step);
      const double loss = train_step(*model, *optimizer, batch, config, lr);
      if (!std::isfinite(loss))
        throw_error(ErrorKind::kInternal, "step " + std::to_string(step),
                    "the loss is not finite; lower optim.lr or enable optim.clip_grad_norm");
      ++step;
      ++step_in_epoch;
      summary.samples += batch.global_batch_len;
      window_samples += batch.global_batch_len;
      window_loss += loss;
      ++window_steps;
      summary.final_train_loss = loss;
      const double now = now_seconds();
      const double elapsed = now - start - excluded;
      obs::ProgressState state{epoch, tc.epochs, step_in_epoch, std::min(steps_per_epoch, total_steps), loss,
                               summary.samples / std::max(elapsed, 1e-9),
                               elapsed / step * static_cast<double>(total_steps - step)};
      progress.update(state);
      if (step % tc.log_every == 0 || step == total_steps) {
        metrics.write(obs::JsonObject()
                          .add("type", "step").add("step", step).add("epoch", epoch)
                          .add("loss", window_loss / window_steps).add("lr", static_cast<double>(lr))
                          .add("samples_per_s", window_samples / std::max(now - window_start, 1e-9))
                          .add("wall_time", now - start));
        window_samples = 0;
        window_loss = 0;
        window_steps = 0;
        window_start = now;
      }
    }
    if (tc.eval_every_epoch) {
      const double eval_start = now_seconds();
      const uint64_t eval_flops = kernels::gemm_flops();
      const EvalResult r = evaluate(*model, test_set);
      flops_excluded += kernels::gemm_flops() - eval_flops;
      summary.test_loss = r.loss;
      summary.test_accuracy = r.accuracy;
      summary.evaluated = true;
      metrics.write(obs::JsonObject()
                        .add("type", "epoch").add("epoch", epoch).add("step", step)
                        .add("test_loss", r.loss).add("test_accuracy", r.accuracy)
                        .add("wall_time", now_seconds() - start));
      progress.finish();
      char line[160];
      std::snprintf(line, sizeof line, "epoch %lld: test loss %.4f, test accuracy %.4f", static_cast<long long>(epoch + 1),
                    r.loss, r.accuracy);
      progress.message(line);
      const double eval_end = now_seconds();
      excluded += eval_end - eval_start;
      window_start += eval_end - eval_start;
    }
  }
  progress.finish();
  summary.steps = step;
  summary.train_seconds = now_seconds() - start - excluded;
  summary.samples_per_s = summary.samples / std::max(summary.train_seconds, 1e-9);
  summary.gemm_gflops_per_s =
      static_cast<double>(kernels::gemm_flops() - flops_start - flops_excluded) / 1e9 / std::max(summary.train_seconds, 1e-9);
  if (config.output.save_weights) {
    summary.weights_path = summary.run_dir + "/model.safetensors";
    save_weights(*model, summary.weights_path, config, step, tc.epochs);
  }
  obs::JsonObject final_line;
  final_line.add("type", "summary").add("steps", step).add("samples", summary.samples)
      .add("train_seconds", summary.train_seconds).add("samples_per_s", summary.samples_per_s)
      .add("gemm_gflops_per_s", summary.gemm_gflops_per_s).add("final_train_loss", summary.final_train_loss);
  if (summary.evaluated) final_line.add("test_loss", summary.test_loss).add("test_accuracy", summary.test_accuracy);
  metrics.write(final_line);
  return summary;
}

}  // namespace gradmesh::train
