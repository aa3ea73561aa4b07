// custom_model: a model gradmesh does not ship, trained data-parallel from a
// program built against an installed gradmesh (README.md next to this file).
//
// The model is a residual MLP written as an nn::Module: x + fc2(gelu(fc1(x)))
// on the flattened image, then a linear classifier head. Every worker holds a
// full replica; a step is forward on the worker's slice of the global batch,
// DataParallel::backward (which sums the gradients over the workers while
// backward runs) and DataParallel::step, so every replica applies the same
// AdamW update and the weights stay identical on every rank (each rank prints
// a fingerprint of its weights at the end to show it).
//
//   gradmesh launch --nproc-per-node 2 -- ./custom_model --steps 300
//   ./custom_model --steps 300        # one process, no launcher
//
// Uses nothing but gradmesh/gradmesh.h.
#include <gradmesh/gradmesh.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gm = gradmesh;
using gm::autograd::Variable;

namespace {

struct Options {
  int64_t steps = 300;
  int64_t batch = 64;  // global: summed over all workers
  int64_t hidden = 256;
  double lr = 2e-3;
  double weight_decay = 0.01;
  int64_t warmup = 20;
  int64_t log_every = 25;
  int64_t seed = 0;
  int64_t threads = 1;  // BLAS and kernel threads per worker
  std::string data_dir;  // "" = $GRADMESH_DATA_DIR, else Debian's Fashion-MNIST
  bool synthetic = false;
  std::string out = "custom_model.safetensors";
};

constexpr const char* kUsage =
    "usage: custom_model [--steps N] [--batch N] [--hidden N] [--lr X] [--weight-decay X] [--warmup N]\n"
    "                    [--log-every N] [--seed N] [--threads N] [--data-dir DIR] [--synthetic] [--out FILE]";

[[noreturn]] void usage_error(const std::string& what) {
  gm::throw_error(gm::ErrorKind::kUsage, "command line", what + "\n" + kUsage);
}

int64_t integer_arg(const std::string& flag, const std::string& text, int64_t min) {
  try {
    size_t used = 0;
    const int64_t v = std::stoll(text, &used);
    if (used == text.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  usage_error(flag + ": expected an integer >= " + std::to_string(min) + ", got '" + text + "'");
}

double number_arg(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v) && v >= 0) return v;
  } catch (const std::exception&) {
  }
  usage_error(flag + ": expected a number >= 0, got '" + text + "'");
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::puts(kUsage);
      std::exit(0);
    }
    if (flag == "--synthetic") {
      o.synthetic = true;
      continue;
    }
    // kUsage spells every flag that takes a value as "[--flag VALUE]".
    if (flag.rfind("--", 0) != 0 || std::string(kUsage).find("[" + flag + " ") == std::string::npos)
      usage_error("unknown flag '" + flag + "'");
    if (i + 1 >= argc) usage_error(flag + ": missing value");
    const std::string value = argv[++i];
    if (flag == "--steps") o.steps = integer_arg(flag, value, 1);
    else if (flag == "--batch") o.batch = integer_arg(flag, value, 1);
    else if (flag == "--hidden") o.hidden = integer_arg(flag, value, 1);
    else if (flag == "--lr") o.lr = number_arg(flag, value);
    else if (flag == "--weight-decay") o.weight_decay = number_arg(flag, value);
    else if (flag == "--warmup") o.warmup = integer_arg(flag, value, 0);
    else if (flag == "--log-every") o.log_every = integer_arg(flag, value, 1);
    else if (flag == "--seed") o.seed = integer_arg(flag, value, 0);
    else if (flag == "--threads") o.threads = integer_arg(flag, value, 1);
    else if (flag == "--data-dir") o.data_dir = value;
    else if (flag == "--out") o.out = value;
    else usage_error("unknown flag '" + flag + "'");
  }
  return o;
}

// x + fc2(gelu(fc1(x))): x [B, dim] -> [B, dim]. Parameters fc1.weight
// [hidden, dim], fc1.bias, fc2.weight [dim, hidden], fc2.bias, as PyTorch
// would name the same block.
class ResidualBlock : public gm::nn::Module {
 public:
  ResidualBlock(int64_t dim, int64_t hidden)
      : dim_(dim),
        hidden_(hidden),
        fc1_(add_child("fc1", std::make_unique<gm::nn::Linear>(dim, hidden))),
        fc2_(add_child("fc2", std::make_unique<gm::nn::Linear>(hidden, dim))) {}

  Variable forward(const Variable& x) override {
    const Variable h = gm::autograd::activation(fc1_.forward(x), gm::nn::Activation::kGelu);
    return gm::autograd::add(x, fc2_.forward(h));
  }
  std::string describe() const override {
    return "ResidualBlock(dim=" + std::to_string(dim_) + ", hidden=" + std::to_string(hidden_) + ")";
  }

 private:
  int64_t dim_, hidden_;
  gm::nn::Module& fc1_;
  gm::nn::Module& fc2_;
};

// images [B, C, H, W] -> flatten -> ResidualBlock -> head: logits [B, classes].
class ResidualMlp : public gm::nn::Module {
 public:
  ResidualMlp(int64_t in_features, int64_t hidden, int64_t classes)
      : block_(add_child("block", std::make_unique<ResidualBlock>(in_features, hidden))),
        head_(add_child("head", std::make_unique<gm::nn::Linear>(in_features, classes))) {}

  Variable forward(const Variable& images) override {
    const int64_t rows = images.shape()[0];
    const Variable x = gm::autograd::reshape(images, {rows, images.value().numel() / rows});
    return head_.forward(block_.forward(x));
  }
  std::string describe() const override { return "ResidualMlp"; }

 private:
  gm::nn::Module& block_;
  gm::nn::Module& head_;
};

struct Data {
  gm::data::ImageDataset train, test;
  std::string source;
};

// The first `n` samples of `all` move into the returned set.
gm::data::ImageDataset take_front(gm::data::ImageDataset& all, int64_t n) {
  gm::data::ImageDataset part = all;
  part.count = n;
  part.pixels.resize(static_cast<size_t>(n * all.sample_numel()));
  part.labels.resize(static_cast<size_t>(n));
  all.count -= n;
  all.pixels.erase(all.pixels.begin(), all.pixels.begin() + n * all.sample_numel());
  all.labels.erase(all.labels.begin(), all.labels.begin() + n);
  return part;
}

// Fashion-MNIST from the data directory when its files are there, else (or
// with --synthetic) a learnable synthetic set of the same shape.
Data load_data(const Options& o, bool need_test) {
  const std::filesystem::path dir = o.data_dir.empty() ? gm::env_string("GRADMESH_DATA_DIR") : o.data_dir;
  Data d;
  if (!o.synthetic && std::filesystem::exists(dir / "train-images-idx3-ubyte.gz")) {
    d.train = gm::data::load_image_dataset((dir / "train-images-idx3-ubyte.gz").string(),
                                           (dir / "train-labels-idx1-ubyte.gz").string());
    if (need_test)
      d.test = gm::data::load_image_dataset((dir / "t10k-images-idx3-ubyte.gz").string(),
                                            (dir / "t10k-labels-idx1-ubyte.gz").string());
    d.source = "Fashion-MNIST from " + dir.string();
    return d;
  }
  d.train = gm::data::synthetic_image_dataset(12000, 1, 28, 28, 10, 1234);
  d.test = take_front(d.train, 2000);
  d.source = o.synthetic ? "synthetic images (--synthetic)"
                         : "synthetic images (no Fashion-MNIST in " + dir.string() + "; set --data-dir)";
  return d;
}

int64_t correct_predictions(const gm::Tensor& logits, const std::vector<int32_t>& labels) {
  const int64_t classes = logits.dim(1);
  const float* row = logits.data();
  int64_t correct = 0;
  for (size_t r = 0; r < labels.size(); ++r, row += classes) {
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c)
      if (row[c] > row[best]) best = c;
    correct += best == labels[r];
  }
  return correct;
}

// Accuracy and mean loss over `set`, without recording a tape.
std::pair<double, double> evaluate(gm::nn::Model& model, const gm::data::ImageDataset& set) {
  gm::autograd::NoGradGuard no_grad;
  model.set_training(false);
  constexpr int64_t kChunk = 500;
  int64_t correct = 0;
  double loss = 0;
  for (int64_t lo = 0; lo < set.count; lo += kChunk) {
    const int64_t n = std::min(kChunk, set.count - lo);
    const auto first = set.pixels.begin() + lo * set.sample_numel();
    const Variable images(gm::Tensor::from_vector({n, set.channels, set.height, set.width},
                                                  std::vector<float>(first, first + n * set.sample_numel())));
    const std::vector<int32_t> labels(set.labels.begin() + lo, set.labels.begin() + lo + n);
    const Variable logits = model.forward(images);
    correct += correct_predictions(logits.value(), labels);
    loss += gm::autograd::cross_entropy(logits, labels, static_cast<float>(set.count)).value().item();
  }
  model.set_training(true);
  return {static_cast<double>(correct) / static_cast<double>(set.count), loss};
}

// FNV-1a over the bytes of every parameter: equal on every rank when the
// replicas agree bit for bit (a tool reading the saved file can recompute it).
uint64_t weights_fingerprint(gm::nn::Model& model) {
  const auto* bytes = static_cast<const unsigned char*>(model.flat_params().raw());
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < model.flat_params().nbytes(); ++i) hash = (hash ^ bytes[i]) * 0x100000001b3ull;
  return hash;
}

// Trains `o.steps` steps, logging the global mean loss and accuracy every `o.log_every`.
void train(const Options& o, gm::nn::Model& model, gm::parallel::DataParallel& dp, gm::data::BatchLoader& loader) {
  gm::optim::ScheduleOptions schedule;
  schedule.kind = "cosine";
  schedule.warmup_steps = std::min(o.warmup, o.steps - 1);
  schedule.total_steps = o.steps;
  int64_t epoch = 0, window_steps = 0;
  double loss_sum = 0, correct = 0, samples = 0;  // this rank's, over the log window
  loader.start_epoch(epoch);
  for (int64_t step = 0; step < o.steps; ++step) {
    gm::data::Batch batch;
    while (!loader.next(batch)) loader.start_epoch(++epoch);
    const float lr = gm::optim::lr_at(schedule, static_cast<float>(o.lr), step);
    const Variable logits = model.forward(Variable(batch.images));
    const auto rows = static_cast<int64_t>(batch.labels.size());
    loss_sum += dp.backward(gm::autograd::cross_entropy(logits, batch.labels), rows, batch.global_batch_len);
    dp.step(lr);
    correct += static_cast<double>(correct_predictions(logits.value(), batch.labels));
    samples += static_cast<double>(rows);
    ++window_steps;
    if ((step + 1) % o.log_every != 0 && step + 1 != o.steps) continue;
    const std::vector<double> all = dp.sum_over_ranks({loss_sum, correct, samples});  // every rank calls it
    if (dp.rank() == 0)
      std::printf("step %lld/%lld  loss %.4f  accuracy %.3f  lr %.6f\n", static_cast<long long>(step + 1),
                  static_cast<long long>(o.steps), all[0] / static_cast<double>(window_steps), all[1] / all[2],
                  static_cast<double>(lr));
    std::fflush(stdout);
    loss_sum = correct = samples = 0;
    window_steps = 0;
  }
}

void save_weights(gm::nn::Model& model, const Options& o, int world) {
  std::vector<gm::checkpoint::NamedTensor> tensors;
  for (auto& [name, tensor] : model.named_parameters()) tensors.push_back({name, tensor});
  gm::checkpoint::write_safetensors(o.out, tensors,
                                    {{"format", "pt"},
                                     {"model", "custom_model ResidualMlp"},
                                     {"steps", std::to_string(o.steps)},
                                     {"world_size", std::to_string(world)}});
}

int run(const Options& o) {
  std::shared_ptr<gm::comm::ProcessGroup> group;
  if (gm::comm::launched_as_worker()) group = gm::comm::init_process_group_from_environment();
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const bool leader = rank == 0;
  gm::set_log_rank(rank);
  gm::kernels::set_num_threads(static_cast<int>(o.threads));
  if (o.batch < world) usage_error("--batch " + std::to_string(o.batch) + " is smaller than the " +
                                   std::to_string(world) + " workers");

  const Data data = load_data(o, leader);
  auto root = std::make_unique<ResidualMlp>(data.train.sample_numel(), o.hidden, data.train.num_classes);
  gm::nn::Model model(std::move(root), static_cast<uint64_t>(o.seed));
  auto optimizer = gm::optim::make_adamw(
      {gm::optim::ParamGroup{0, model.num_parameters(), static_cast<float>(o.weight_decay)}}, {});
  gm::parallel::DataParallel dp(model, *optimizer, group);  // starts every replica from rank 0's weights

  gm::data::BatchLoaderOptions lo;
  lo.global_batch = o.batch;
  lo.seed = static_cast<uint64_t>(o.seed);
  lo.drop_last = true;
  lo.rank = rank;
  lo.world = world;
  gm::data::BatchLoader loader(data.train, lo);
  if (leader) {
    const std::string backend = group ? " over " + group->backend() : "";
    std::printf("custom_model: %d worker(s)%s, %s: %lld training images\n%s", world, backend.c_str(),
                data.source.c_str(), static_cast<long long>(data.train.count), model.summary().c_str());
  }

  train(o, model, dp, loader);
  std::printf("rank %d weights fingerprint %016llx\n", rank,
              static_cast<unsigned long long>(weights_fingerprint(model)));
  if (leader) {
    const auto [accuracy, loss] = evaluate(model, data.test);
    std::printf("test accuracy %.4f  loss %.4f  (%lld images)\n", accuracy, loss,
                static_cast<long long>(data.test.count));
    save_weights(model, o, world);
    std::printf("saved weights to %s\n", o.out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_options(argc, argv));
  } catch (const gm::Error& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_model: %s\n", e.what());
    return 1;
  }
}
