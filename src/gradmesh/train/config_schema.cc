#include "gradmesh/train/config_schema.h"

#include "gradmesh/obs/jsonl_writer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "gradmesh/core/env.h"

namespace gradmesh::train {
namespace {

// Section struct <-> section name and its place in Config: the only spot
// that ties the two together, so a key can never land in the wrong section.
template <class S> struct SectionOf;
#define GRADMESH_CONFIG_SECTION(Type, member)                        \
  template <> struct SectionOf<Type> {                               \
    static constexpr const char* kName = #member;                    \
    static Type& in(Config& c) { return c.member; }                  \
    static const Type& in(const Config& c) { return c.member; }      \
  };
GRADMESH_CONFIG_SECTION(ModelConfig, model)
GRADMESH_CONFIG_SECTION(DataConfig, data)
GRADMESH_CONFIG_SECTION(OptimConfig, optim)
GRADMESH_CONFIG_SECTION(ScheduleConfig, schedule)
GRADMESH_CONFIG_SECTION(TrainConfig, train)
GRADMESH_CONFIG_SECTION(ParallelConfig, parallel)
GRADMESH_CONFIG_SECTION(OutputConfig, output)
GRADMESH_CONFIG_SECTION(CheckpointConfig, checkpoint)
GRADMESH_CONFIG_SECTION(ElasticConfig, elastic)
GRADMESH_CONFIG_SECTION(MeteringConfig, metering)
#undef GRADMESH_CONFIG_SECTION

template <class T> struct MemberOf;
template <class S, class F> struct MemberOf<F S::*> {
  using Section = S;
  using Field = F;
};

template <class F> constexpr KeyType key_type_of() {
  if constexpr (std::is_same_v<F, bool>) return KeyType::kBool;
  else if constexpr (std::is_same_v<F, int64_t> || std::is_same_v<F, uint64_t>) return KeyType::kInt;
  else if constexpr (std::is_same_v<F, double>) return KeyType::kFloat;
  else if constexpr (std::is_same_v<F, std::string>) return KeyType::kString;
  else {
    static_assert(std::is_same_v<F, std::vector<int64_t>>, "unsupported config member type");
    return KeyType::kIntList;
  }
}

template <class F> KeyValue to_key_value(const F& field) {
  if constexpr (std::is_same_v<F, uint64_t>) return KeyValue(static_cast<int64_t>(field));
  else return KeyValue(field);
}

template <class F> F from_key_value(const KeyValue& value) {
  if constexpr (std::is_same_v<F, uint64_t>) return static_cast<uint64_t>(std::get<int64_t>(value));
  else return std::get<F>(value);
}

// One schema entry bound to a struct member; type and section come from the
// member pointer, so the table cannot disagree with the structs.
template <auto Member>
KeySpec key(const char* name, typename MemberOf<decltype(Member)>::Field default_value,
            KeyConstraint constraint, const char* doc) {
  using S = typename MemberOf<decltype(Member)>::Section;
  using F = typename MemberOf<decltype(Member)>::Field;
  KeySpec spec;
  spec.section = SectionOf<S>::kName;
  spec.path = spec.section + "." + name;
  spec.type = key_type_of<F>();
  spec.default_value = to_key_value(default_value);
  spec.constraint = std::move(constraint);
  spec.doc = doc;
  spec.get = [](const Config& c) { return to_key_value(SectionOf<S>::in(c).*Member); };
  spec.set = [](Config& c, const KeyValue& v) { SectionOf<S>::in(c).*Member = from_key_value<F>(v); };
  spec.set_in_section = [](void* s, const KeyValue& v) { static_cast<S*>(s)->*Member = from_key_value<F>(v); };
  return spec;
}

KeyConstraint any() { return {}; }
KeyConstraint bounded(std::optional<double> lo, bool lo_open, std::optional<double> hi, bool hi_open) {
  KeyConstraint c;
  c.lo = lo, c.lo_open = lo_open, c.hi = hi, c.hi_open = hi_open;
  return c;
}
KeyConstraint at_least(double lo) { return bounded(lo, false, std::nullopt, false); }
KeyConstraint closed(double lo, double hi) { return bounded(lo, false, hi, false); }
KeyConstraint half_open(double lo, double hi) { return bounded(lo, false, hi, true); }
KeyConstraint open_closed(double lo, double hi) { return bounded(lo, true, hi, false); }
KeyConstraint one_of(std::vector<std::string> choices) {
  KeyConstraint c;
  c.choices = std::move(choices);
  return c;
}
KeyConstraint entries_in(double lo, double hi, size_t min_items) {
  KeyConstraint c = closed(lo, hi);
  c.min_items = min_items;
  return c;
}

// Upper bounds. Every number a config can hold has one, so nothing derived
// from it (byte counts, milliseconds, step counts, layer sizes) can overflow
// a cast or a product; each is far above any sensible value.
constexpr double kMaxWidth = 1 << 20;            // layer widths and channels
constexpr double kMaxClasses = 1'000'000;
constexpr double kMaxSamples = 2147483648.0;     // 2^31: more than an IDX file can hold (data/idx.h)
constexpr double kMaxScale = 1e6;                // pixel normalisation constants
constexpr double kMaxCoefficient = 1e6;          // rates, decays, norms, factors
constexpr double kMaxSteps = 1e12;               // optimizer step counts
constexpr double kMaxEpochs = 1e6;
constexpr double kMaxAccumSteps = 1 << 20;
constexpr double kMaxThreads = 1024;
constexpr double kMaxBucketMb = 65536;           // 64 GiB
constexpr double kMaxTimeoutS = 7 * 24 * 3600;   // a week
constexpr double kMaxTraceSteps = 100'000;

std::vector<KeySpec> build_schema() {
  // clang-format off
  return {
    key<&ModelConfig::kind>("kind", "mlp", one_of({"mlp", "cnn", "gpt"}), "Model family: a multilayer perceptron, a small convolutional net (both on images) or a GPT-style transformer language model (on data.format = \"tokens\")."),
    key<&ModelConfig::classes>("classes", 10, closed(2, kMaxClasses), "Number of classes: the width of the output layer. Every label in the data must lie in [0, classes)."),
    key<&ModelConfig::hidden>("hidden", {512, 512}, entries_in(1, kMaxWidth, 0), "MLP hidden layer widths; empty gives logistic regression (one linear layer)."),
    key<&ModelConfig::activation>("activation", "relu", one_of({"relu", "gelu", "tanh"}), "MLP: activation after each hidden layer (the CNN always uses ReLU)."),
    key<&ModelConfig::dropout>("dropout", 0.0, half_open(0, 1), "Dropout probability (0 = off). MLP: after each hidden activation; GPT: after the embeddings and on each residual branch (not on attention weights)."),
    key<&ModelConfig::channels>("channels", {32, 64}, entries_in(1, kMaxWidth, 1), "CNN: output channels of each conv block (conv, ReLU, 2x2 max pool)."),
    key<&ModelConfig::kernel_size>("kernel_size", 3, closed(1, 7), "CNN: square conv kernel size (no padding, stride 1)."),
    key<&ModelConfig::fc_hidden>("fc_hidden", 128, closed(1, kMaxWidth), "CNN: width of the hidden linear layer after the flatten."),
    key<&ModelConfig::n_layer>("n_layer", 4, closed(1, 1024), "GPT: transformer blocks."),
    key<&ModelConfig::n_head>("n_head", 4, closed(1, 1024), "GPT: attention heads per block; must divide n_embd."),
    key<&ModelConfig::n_embd>("n_embd", 128, closed(1, 65536), "GPT: embedding width (the residual stream); the MLP inside a block is 4x wider."),
    key<&ModelConfig::block_size>("block_size", 128, closed(1, 65536), "GPT: context length in tokens (the training window and the position table)."),
    key<&ModelConfig::vocab_size>("vocab_size", 0, closed(0, 1 << 20), "GPT: vocabulary size; 0 = the token set's (data.tokens/vocab.json). A nanoGPT data directory (train.bin without vocab.json) needs it set: 50304 for GPT-2's tokenizer as nanoGPT pads it."),
    key<&ModelConfig::tie_weights>("tie_weights", true, any(), "GPT: the LM head reuses the token embedding matrix (lm_head.weight is transformer.wte.weight)."),
    key<&ModelConfig::recompute>("recompute", false, any(), "GPT: activation checkpointing: blocks keep only their input in forward and recompute the rest during backward (less memory for activations, about one more forward of the blocks in time; the same gradients)."),
    key<&ModelConfig::init>("init", "default", one_of({"default", "kaiming_normal", "kaiming_uniform", "xavier_uniform", "xavier_normal"}), "Weight init; default is PyTorch's: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases."),

    key<&DataConfig::format>("format", "idx", one_of({"idx", "mds", "tokens"}), "idx: image classification from the IDX files below, loaded whole; mds: image classification from sharded MDS sets (data.train_set, data.test_set) written by gradmesh data prepare, each rank reading only its samples; tokens: language modelling on a token set written by gradmesh data prepare-text (data.tokens)."),
    key<&DataConfig::train_set>("train_set", "", any(), "format = mds: the training set's directory (index.json and its shards); relative paths are taken from the working directory."),
    key<&DataConfig::test_set>("test_set", "", any(), "format = mds: the evaluation set's directory; empty with train.eval_every_epoch = true is an error."),
    key<&DataConfig::verify_shards>("verify_shards", false, any(), "format = mds: read every shard whole once at start and compare its xxh64 with index.json (every rank reads every shard; `gradmesh inspect DIR` checks a set once instead)."),
    key<&DataConfig::tokens>("tokens", "", any(), "format = tokens: the token set directory (vocab.json, train.bin, val.bin); relative paths are taken from the working directory."),
    key<&DataConfig::windows_per_epoch>("windows_per_epoch", 0, closed(0, kMaxSamples), "format = tokens: training windows (of model.block_size tokens, at random positions) per epoch; 0 = training tokens / block_size."),
    key<&DataConfig::dir>("dir", "", any(), "Directory of the IDX files; empty uses $GRADMESH_DATA_DIR (default /usr/share/datasets/fashion-mnist)."),
    key<&DataConfig::train_images>("train_images", "train-images-idx3-ubyte.gz", any(), "Training images (IDX, optionally gzipped), relative to data.dir."),
    key<&DataConfig::train_labels>("train_labels", "train-labels-idx1-ubyte.gz", any(), "Training labels (IDX, optionally gzipped), relative to data.dir."),
    key<&DataConfig::test_images>("test_images", "t10k-images-idx3-ubyte.gz", any(), "Test images (IDX, optionally gzipped), relative to data.dir."),
    key<&DataConfig::test_labels>("test_labels", "t10k-labels-idx1-ubyte.gz", any(), "Test labels (IDX, optionally gzipped), relative to data.dir."),
    key<&DataConfig::scale>("scale", 1.0 / 255.0, closed(-kMaxScale, kMaxScale), "Pixel normalisation: pixel = (byte * scale - mean) / std; the default maps bytes to [0, 1]."),
    key<&DataConfig::mean>("mean", 0.0, closed(-kMaxScale, kMaxScale), "Subtracted after scaling."),
    key<&DataConfig::std>("std", 1.0, open_closed(0, kMaxScale), "Divides after subtracting the mean."),
    key<&DataConfig::shuffle>("shuffle", true, any(), "Shuffle the training set each epoch (a permutation drawn from train.seed and the epoch)."),
    key<&DataConfig::drop_last>("drop_last", false, any(), "Drop the last incomplete training batch of each epoch."),
    key<&DataConfig::shuffle_block_shards>("shuffle_block_shards", 4, closed(0, 1 << 20), "format = mds: the shard-aware shuffle (docs/data.md): the shards in a drawn order, cut into blocks of this many shards' samples, each block permuted, so a batch reads from a few shards; computed on demand, with no per-sample memory. 0 = one permutation of the whole set, as the IDX path draws it."),
    key<&DataConfig::prefetch>("prefetch", 2, closed(1, 64), "Batches the loader thread prepares ahead of the training step."),
    key<&DataConfig::workers>("workers", 1, closed(1, 256), "Threads filling each batch: reading samples, decoding JPEG and PNG images, augmenting (the loader thread and workers - 1 more). Any value gives the same samples."),
    key<&DataConfig::crop_padding>("crop_padding", 0, closed(0, 1024), "format = mds: training images are padded with zeros by this many pixels on each side and cropped back to their size at a random offset (torchvision's RandomCrop(size, padding)); 0 = no crop. Drawn from (train.seed, epoch, sample)."),
    key<&DataConfig::cache_mb>("cache_mb", 256, closed(0, 1 << 20), "format = mds with an http:// or https:// set: the reader's in-memory cache of 1 MiB shard blocks, in MiB, per rank (0 = none: every read fetches its own bytes). A local set is read through the page cache instead."),
    key<&DataConfig::flip>("flip", false, any(), "format = mds: training images are mirrored left-right with probability 1/2 (torchvision's RandomHorizontalFlip). Drawn from (train.seed, epoch, sample)."),
    key<&DataConfig::limit_train>("limit_train", 0, closed(0, kMaxSamples), "Use only the first N training samples (0 = all); for quick tests."),
    key<&DataConfig::limit_test>("limit_test", 0, closed(0, kMaxSamples), "Use only the first N test samples (0 = all; with data.format = \"tokens\", N validation windows); for quick tests."),

    key<&OptimConfig::name>("name", "sgd", one_of({"sgd", "adamw"}), "Optimizer, with PyTorch's update rules (torch.optim.SGD, torch.optim.AdamW)."),
    key<&OptimConfig::lr>("lr", 0.05, open_closed(0, kMaxCoefficient), "Peak learning rate (the schedule scales it)."),
    key<&OptimConfig::momentum>("momentum", 0.9, half_open(0, 1), "SGD momentum (0 = plain SGD)."),
    key<&OptimConfig::dampening>("dampening", 0.0, half_open(0, 1), "SGD momentum dampening."),
    key<&OptimConfig::nesterov>("nesterov", false, any(), "SGD Nesterov momentum; needs momentum > 0 and dampening = 0."),
    key<&OptimConfig::weight_decay>("weight_decay", 0.0, closed(0, kMaxCoefficient), "SGD: L2 penalty added to the gradient; AdamW: decoupled decay."),
    key<&OptimConfig::beta1>("beta1", 0.9, half_open(0, 1), "AdamW: decay of the first-moment average."),
    key<&OptimConfig::beta2>("beta2", 0.999, half_open(0, 1), "AdamW: decay of the second-moment average."),
    key<&OptimConfig::eps>("eps", 1e-8, open_closed(0, 1), "AdamW: added to the denominator."),
    key<&OptimConfig::clip_grad_norm>("clip_grad_norm", 0.0, closed(0, kMaxCoefficient), "Clip the global gradient L2 norm to this value before the step (0 = no clipping)."),

    key<&ScheduleConfig::kind>("kind", "constant", one_of({"constant", "step", "cosine"}), "Learning-rate schedule after warmup."),
    key<&ScheduleConfig::warmup_steps>("warmup_steps", 0, closed(0, kMaxSteps), "Linear warmup: step i < warmup_steps uses optim.lr * (i + 1) / warmup_steps."),
    key<&ScheduleConfig::step_size>("step_size", 1000, closed(1, kMaxSteps), "step: multiply the rate by gamma every step_size optimizer steps after the warmup."),
    key<&ScheduleConfig::gamma>("gamma", 0.1, open_closed(0, 1), "step: the decay factor."),
    key<&ScheduleConfig::min_lr>("min_lr", 0.0, closed(0, kMaxCoefficient), "cosine: the rate the decay ends at, one step after the run's last (the last step trains just above it); at most optim.lr."),

    key<&TrainConfig::epochs>("epochs", 1, closed(1, kMaxEpochs), "Passes over the training set."),
    key<&TrainConfig::batch_size>("batch_size", 128, closed(1, kMaxSamples), "Global batch size: samples per optimizer step over all ranks and micro-steps."),
    key<&TrainConfig::seed>("seed", 0, at_least(0), "Seeds init, shuffling and dropout; equal seeds give equal runs."),
    key<&TrainConfig::max_steps>("max_steps", 0, closed(0, kMaxSteps), "Stop after this many optimizer steps (0 = no limit)."),
    key<&TrainConfig::accum_steps>("accum_steps", 1, closed(1, kMaxAccumSteps), "Gradient accumulation: micro-steps per optimizer step."),
    key<&TrainConfig::threads>("threads", 1, closed(0, kMaxThreads), "Compute threads for BLAS and kernels (0 = $GRADMESH_NUM_THREADS, else all cores)."),
    key<&TrainConfig::precision>("precision", "fp32", one_of({"fp32", "bf16"}), "What the matrix products (every Linear, convolution and attention product) multiply in: fp32, or bf16 operands with float32 sums through oneDNN on the CPU's bf16 dot products (AVX512_BF16, AMX; where missing, bf16 values multiplied by OpenBLAS, and said so). Weights, optimizer state, gradients' reductions and checkpoints stay float32 (docs/engine.md)."),
    key<&TrainConfig::portable_numerics>("portable_numerics", false, any(), "true: gradmesh's own float32 kernels (attention, GELU, LayerNorm) use no fused multiply-add, the arithmetic of earlier releases (fast on CPUs without FMA). false: they fuse multiply-adds explicitly, faster where the CPU has FMA. Either way the bits are the same at every instruction-set level (docs/engine.md)."),
    key<&TrainConfig::log_every>("log_every", 50, closed(1, kMaxSteps), "Log a metrics line every N optimizer steps."),
    key<&TrainConfig::eval_every_epoch>("eval_every_epoch", true, any(), "Evaluate on the test set after every epoch."),
    key<&TrainConfig::init_from>("init_from", "", any(), "Safetensors file with initial weights (empty = random init from train.seed)."),

    key<&ParallelConfig::backend>("backend", "auto", one_of({"auto", "shm", "gloo", "hier", "mpi"}), "Collective backend; auto picks mpi under mpirun, shm on one host, hier across hosts with several ranks each, else gloo."),
    key<&ParallelConfig::bucket_mb>("bucket_mb", 1.0, open_closed(0, kMaxBucketMb), "Gradient bucket size in MiB: gradients are all-reduced in buckets of about this size while backward goes on (1 measured best on the reference CNN; bench/ddp.py --buckets)."),
    key<&ParallelConfig::first_bucket_mb>("first_bucket_mb", 1.0, open_closed(0, kMaxBucketMb), "Size of the first bucket (the last layers' gradients, ready first), so communication starts early."),
    key<&ParallelConfig::comm_dtype>("comm_dtype", "f32", one_of({"f32", "bf16"}), "Element type gradients travel in; bf16 halves the traffic and is summed in float32."),
    key<&ParallelConfig::overlap>("overlap", true, any(), "Start each bucket's all-reduce as soon as its gradients are final (false: after the whole backward, for comparison)."),
    key<&ParallelConfig::timeout_s>("timeout_s", 0.0, closed(0, kMaxTimeoutS), "Timeout of every collective in seconds (0 = $GRADMESH_COMM_TIMEOUT, default 300); a rank that does not arrive in time fails the job with its name."),
    key<&ParallelConfig::slow_rank_factor>("slow_rank_factor", 1.2, open_closed(1, kMaxCoefficient), "Rank 0 flags a rank whose compute time exceeds the median rank's by this factor in three log intervals in a row."),
    key<&ParallelConfig::straggler>("straggler", "none", one_of({"none", "rebalance"}), "rebalance: every parallel.rebalance_every steps, give each rank a share of the global batch proportional to its measured speed, so a slow rank holds the step up less (same global batch; not bit-reproducible)."),
    key<&ParallelConfig::rebalance_every>("rebalance_every", 5, closed(1, kMaxSteps), "With straggler = \"rebalance\": gather every rank's phase times and re-split the batch every N optimizer steps (a small all-gather each time)."),

    key<&ParallelConfig::zero>("zero", 0, closed(0, 3), "ZeRO stage with several ranks (docs/zero.md): 0 = plain data parallelism (every rank holds all parameters, gradients and optimizer state); 1 = each rank keeps the optimizer state of its shard only; 2 = also only its shard of the reduced gradients; 3 = also only its shard of the parameters, each unit's (a GPT block's) gathered just before it runs forward and backward. Same weights as 0 up to float rounding. With a split model (mesh.pp or mesh.tp > 1) it runs over the dp groups; stage 3 is refused with pipeline stages. A single process ignores it."),

    key<&ParallelConfig::mesh_dp>("mesh.dp", 0, closed(0, 1 << 20), "Data-parallel degree of the device mesh (docs/model-parallel.md); 0 = the world size over pp x tp. dp x pp x tp must equal the world size; ranks are laid out with tp fastest, then pp, then dp (Megatron's order). Written mesh = { dp = 2, pp = 2, tp = 1 } or mesh.dp = 2."),
    key<&ParallelConfig::mesh_pp>("mesh.pp", 1, closed(1, 1 << 20), "Pipeline stages of the device mesh: consecutive GPT blocks on different ranks."),
    key<&ParallelConfig::mesh_tp>("mesh.tp", 1, closed(1, 1 << 20), "Tensor-parallel degree of the device mesh: each layer's matrices split across this many ranks."),

    key<&ParallelConfig::micro_batches>("micro_batches", 4, closed(1, 1 << 20), "With pipeline stages (mesh.pp > 1): micro-batches each data-parallel rank's share of a global batch is cut into and streamed through the stages; the bubble is (pp - 1) / (micro_batches + pp - 1) of a step. Gradients accumulate over them (use it instead of train.accum_steps)."),
    key<&ParallelConfig::pipeline_schedule>("pipeline_schedule", "1f1b", one_of({"1f1b", "gpipe"}), "With pipeline stages: 1f1b (PipeDream-flush: stage s holds at most pp - s micro-batches' activations) or gpipe (all forwards, then all backwards: holds all of them)."),

    key<&ParallelConfig::compression>("compression", "none", one_of({"none", "powersgd"}), "How gradients cross the network (docs/scaling.md): none = exact all-reduce; powersgd = each weight matrix's gradient as two rank-r factors with error feedback (Vogels et al. 2019, PyTorch's powerSGD_hook); biases and small matrices stay exact. Plain data parallelism only (parallel.zero = 0, comm_dtype = \"f32\")."),
    key<&ParallelConfig::powersgd_rank>("powersgd_rank", 4, closed(1, 1024), "With compression = \"powersgd\": the rank r of the factors; a [n, m] gradient sends r * (n + m) numbers instead of n * m."),
    key<&ParallelConfig::powersgd_start_step>("powersgd_start_step", 10, closed(0, kMaxSteps), "With compression = \"powersgd\": optimizer steps reduced exactly before compression starts (PyTorch's start_powerSGD_iter)."),
    key<&ParallelConfig::local_steps>("local_steps", 1, closed(1, kMaxSteps), "Local SGD / DiLoCo (docs/scaling.md): > 1 = each rank takes this many optimizer steps on its own share of the batches without exchanging gradients, then the ranks average their parameter change and take one outer step (outer_lr, outer_momentum). Cuts the traffic by this factor. Plain data parallelism only."),
    key<&ParallelConfig::outer_lr>("outer_lr", 1.0, open_closed(0, 10), "With local_steps > 1: learning rate of the outer step on the ranks' averaged parameter change (1 with outer_momentum = 0 is plain parameter averaging; DiLoCo uses 0.7 with momentum 0.9)."),
    key<&ParallelConfig::outer_momentum>("outer_momentum", 0.0, half_open(0, 1), "With local_steps > 1: Nesterov momentum of the outer step (0 = none)."),

    key<&OutputConfig::dir>("dir", "runs", any(), "Run directories are created under this directory."),
    key<&OutputConfig::run_id>("run_id", "", any(), "Run directory name; empty = UTC timestamp yyyymmdd-hhmmss plus a short random suffix."),
    key<&OutputConfig::save_weights>("save_weights", true, any(), "Write <run>/model.safetensors at the end."),
    key<&OutputConfig::weights_dtype>("weights_dtype", "F32", one_of({"F32", "BF16"}), "Element type of the saved weights."),
    key<&OutputConfig::trace_steps>("trace_steps", 20, closed(0, kMaxTraceSteps), "Optimizer steps recorded in trace.rank<R>.json (Chrome trace format; 0 = no trace)."),
    key<&OutputConfig::report>("report", true, any(), "Write report.html: loss, accuracy, throughput and per-rank phase times as inline SVG charts."),

    key<&CheckpointConfig::every_steps>("every_steps", 0, closed(0, kMaxSteps), "Save a checkpoint every N optimizer steps (0 = not by step count)."),
    key<&CheckpointConfig::every_seconds>("every_seconds", 0.0, closed(0, kMaxTimeoutS), "Save a checkpoint when this many seconds passed since the last one (0 = not by time)."),
    key<&CheckpointConfig::keep_last>("keep_last", 3, closed(0, 1000000), "Committed checkpoints kept; older ones are deleted (0 = keep all)."),
    key<&CheckpointConfig::async>("async", true, any(), "Copy the state into memory and write it on a background thread (false: the step loop waits for the write)."),
    key<&CheckpointConfig::dir>("dir", "", any(), "Where step-<N>/ directories go; empty = <run>/checkpoints."),

    key<&ElasticConfig::recovery>("recovery", "restart", one_of({"restart", "in-process"}), "Under gradmesh launch, what happens when a worker dies: restart = every worker restarts from the latest checkpoint; in-process = the survivors keep their state, re-form the group with a replacement and hand it the state over the group."),

    key<&MeteringConfig::example_prices>("example_prices", true, any(), "Whether the prices are the built-in examples, which every cost shown then says. It turns false by itself when the config or a --set names any price; set it false to declare the default prices your own."),
    key<&MeteringConfig::currency>("currency", "USD", any(), "The currency the prices are in; shown next to every cost."),
    key<&MeteringConfig::price_per_core_hour>("price_per_core_hour", 0.0425, closed(0, 1e6), "Price of one CPU core for one hour; charged on the core-seconds the workers used (user + system time, getrusage), not on the cores they were given. Example default."),
    key<&MeteringConfig::price_per_gb_month>("price_per_gb_month", 0.023, closed(0, 1e6), "Price of keeping 1 GB (10^9 bytes) of checkpoints for a month (730 hours); the run accrues it for the bytes its checkpoints occupy, for as long as they do. Example default."),
    key<&MeteringConfig::price_per_gb_egress>("price_per_gb_egress", 0.01, closed(0, 1e6), "Price of 1 GB sent from one host to another (collective traffic between hosts; traffic within a host is free). Example default."),
  };
  // clang-format on
}

void fill_section_defaults(const char* section, void* section_struct) {
  for (const KeySpec& spec : config_schema())
    if (spec.section == section) spec.set_in_section(section_struct, spec.default_value);
}

// "1000000" rather than the shorter "1e+06" for bounds a reader compares with whole numbers.
std::string bound_number(double value) {
  if (value == std::trunc(value) && std::abs(value) < 1e7) return std::to_string(static_cast<int64_t>(value));
  return number_text(value);
}

std::string bound_text(const KeyConstraint& c) {
  if (c.lo && c.hi)
    return std::string(c.lo_open ? "(" : "[") + bound_number(*c.lo) + ", " + bound_number(*c.hi) +
           (c.hi_open ? ")" : "]");
  if (c.lo) return std::string(c.lo_open ? "> " : ">= ") + bound_number(*c.lo);
  if (c.hi) return std::string(c.hi_open ? "< " : "<= ") + bound_number(*c.hi);
  return "";
}

std::string with_bound(const std::string& noun, const KeyConstraint& c) {
  std::string bound = bound_text(c);
  if (bound.empty()) return noun;
  return noun + (c.lo && c.hi ? " in " : " ") + bound;
}

bool in_bounds(double v, const KeyConstraint& c) {
  if (c.lo && (c.lo_open ? !(v > *c.lo) : !(v >= *c.lo))) return false;
  if (c.hi && (c.hi_open ? !(v < *c.hi) : !(v <= *c.hi))) return false;
  return true;
}

std::string choices_text(const std::vector<std::string>& choices, const char* sep) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) out += (i ? sep : "") + toml_quote(choices[i]);
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above_cell = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above_cell;
    }
  }
  return row[b.size()];
}

// Markdown cell text: pipes would end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

std::string allowed_cell(const KeySpec& spec) {
  const KeyConstraint& c = spec.constraint;
  if (!c.choices.empty()) return "`" + choices_text(c.choices, "`, `") + "`";
  std::string bound = bound_text(c);
  if (spec.type == KeyType::kIntList) {
    std::string out = bound.empty() ? "any integers" : "each " + bound;
    if (c.min_items == 0) return out + "; may be empty";
    return out + "; at least " + std::to_string(c.min_items) + (c.min_items == 1 ? " entry" : " entries");
  }
  if (spec.type == KeyType::kFloat) return bound.empty() ? "any finite number" : bound;
  return bound.empty() ? "any" : bound;
}

const char* type_cell(KeyType type) {
  switch (type) {
    case KeyType::kBool: return "bool";
    case KeyType::kInt: return "integer";
    case KeyType::kFloat: return "float";
    case KeyType::kString: return "string";
    case KeyType::kIntList: return "integer array";
  }
  return "?";
}

}  // namespace

std::string number_text(double value) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

ModelConfig::ModelConfig() { fill_section_defaults("model", this); }
DataConfig::DataConfig() { fill_section_defaults("data", this); }
OptimConfig::OptimConfig() { fill_section_defaults("optim", this); }
ScheduleConfig::ScheduleConfig() { fill_section_defaults("schedule", this); }
TrainConfig::TrainConfig() { fill_section_defaults("train", this); }
ParallelConfig::ParallelConfig() { fill_section_defaults("parallel", this); }
OutputConfig::OutputConfig() { fill_section_defaults("output", this); }
CheckpointConfig::CheckpointConfig() { fill_section_defaults("checkpoint", this); }
ElasticConfig::ElasticConfig() { fill_section_defaults("elastic", this); }
MeteringConfig::MeteringConfig() { fill_section_defaults("metering", this); }

const std::vector<SectionSpec>& config_sections() {
  static const std::vector<SectionSpec> sections = {
      {"model", "The network: `mlp` (the image's pixels in, hidden layers, `classes` outputs), `cnn` (conv blocks, one hidden linear layer, `classes` outputs) or `gpt` (a transformer language model on a token set)."},
      {"data", "What the model trains on (images from IDX files, plain or gzipped, or a token set from `gradmesh data prepare-text`), where it is, and how it is normalised, shuffled and batched."},
      {"optim", "The optimizer; SGD keys are ignored by AdamW and the other way round."},
      {"schedule", "How the learning rate changes with the optimizer step: an optional linear warmup, then `constant`, `step` (optim.lr * gamma^floor(s / step_size)) or `cosine` (from optim.lr down towards min_lr over the rest of the run, as PyTorch's CosineAnnealingLR with T_max = the steps after warmup: the last step's rate is just above min_lr, which the step after the run would reach)."},
      {"train", "The training loop."},
      {"parallel", "Data-parallel training: how ranks exchange gradients. A single process ignores this section."},
      {"output", "What a run writes and where."},
      {"checkpoint", "Checkpoints: `<run>/checkpoints/step-<N>/` with the weights, the optimizer state, `trainer.json` and a checksummed `manifest.json` (docs/checkpoint.md). `gradmesh train --resume auto` continues from the newest one that verifies."},
      {"elastic", "Recovery from failed workers under `gradmesh launch` (docs/launch.md)."},
      {"metering", "What the run's resources cost (docs/observability.md): the cost so far, by kind, goes into metrics.jsonl, report.html and the dashboard. The default prices are examples (about a cloud's on-demand CPU core-hour, object storage and inter-zone traffic in 2026), and the outputs say so until any price is set here."},
  };
  return sections;
}

const std::vector<KeySpec>& config_schema() {
  static const std::vector<KeySpec> schema = build_schema();
  return schema;
}

const KeySpec* find_key(const std::string& path) {
  for (const KeySpec& spec : config_schema())
    if (spec.path == path) return &spec;
  return nullptr;
}

bool is_section(const std::string& name) {
  for (const SectionSpec& section : config_sections())
    if (section.name == name) return true;
  return false;
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    size_t distance = edit_distance(name, candidate);
    if (distance < best_distance) best_distance = distance, best = candidate;
  }
  if (!best.empty() || name.size() < 3) return best;
  for (const std::string& candidate : candidates)
    if (candidate.rfind(name, 0) == 0 || name.rfind(candidate, 0) == 0) return candidate;
  return "";
}

std::string describe_type(KeyType type) {
  switch (type) {
    case KeyType::kBool: return "a boolean (true or false)";
    case KeyType::kInt: return "an integer";
    case KeyType::kFloat: return "a number";
    case KeyType::kString: return "a string";
    case KeyType::kIntList: return "an array of integers";
  }
  return "?";
}

std::string describe_expected(const KeySpec& spec) {
  const KeyConstraint& c = spec.constraint;
  if (!c.choices.empty()) return "one of " + choices_text(c.choices, ", ");
  if (spec.type == KeyType::kIntList) return with_bound("an array of integers", c);
  return with_bound(describe_type(spec.type), c);
}

std::string check_value(const KeySpec& spec, const KeyValue& value, int64_t* index_out) {
  const KeyConstraint& c = spec.constraint;
  *index_out = -1;
  switch (spec.type) {
    case KeyType::kBool: return "";
    case KeyType::kInt: {
      int64_t v = std::get<int64_t>(value);
      if (in_bounds(static_cast<double>(v), c)) return "";
      return "expected " + describe_expected(spec) + ", got " + std::to_string(v);
    }
    case KeyType::kFloat: {
      double v = std::get<double>(value);
      if (!std::isfinite(v)) return "expected a finite number, got " + number_text(v);
      if (in_bounds(v, c)) return "";
      return "expected " + describe_expected(spec) + ", got " + number_text(v);
    }
    case KeyType::kString: {
      const std::string& v = std::get<std::string>(value);
      if (c.choices.empty() || std::find(c.choices.begin(), c.choices.end(), v) != c.choices.end()) return "";
      return "expected " + describe_expected(spec) + ", got " + toml_quote(v);
    }
    case KeyType::kIntList: {
      const auto& v = std::get<std::vector<int64_t>>(value);
      if (v.size() < c.min_items)
        return "expected at least " + std::to_string(c.min_items) + (c.min_items == 1 ? " entry" : " entries") +
               ", got " + (v.empty() ? std::string("an empty array") : std::to_string(v.size()));
      for (size_t i = 0; i < v.size(); ++i) {
        if (in_bounds(static_cast<double>(v[i]), c)) continue;
        *index_out = static_cast<int64_t>(i);
        return "expected " + with_bound("an integer", c) + ", got " + std::to_string(v[i]);
      }
      return "";
    }
  }
  return "";
}

std::string toml_quote(const std::string& text) { return "\"" + obs::json_escape(text) + "\""; }

std::string format_value(const KeyValue& value) {
  switch (static_cast<KeyType>(value.index())) {
    case KeyType::kBool: return std::get<bool>(value) ? "true" : "false";
    case KeyType::kInt: return std::to_string(std::get<int64_t>(value));
    case KeyType::kFloat: {
      // TOML needs a '.' or an exponent to read the text back as a float.
      std::string text = number_text(std::get<double>(value));
      if (text.find_first_of(".eni") == std::string::npos) text += ".0";
      return text;
    }
    case KeyType::kString: return toml_quote(std::get<std::string>(value));
    case KeyType::kIntList: {
      std::string out = "[";
      const auto& list = std::get<std::vector<int64_t>>(value);
      for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + std::to_string(list[i]);
      return out + "]";
    }
  }
  return "";
}

std::string config_markdown() {
  std::string out;
  for (const SectionSpec& section : config_sections()) {
    if (!out.empty()) out += "\n";
    out += "### `[" + section.name + "]`\n\n" + section.doc + "\n\n";
    out += "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
    for (const KeySpec& spec : config_schema()) {
      if (spec.section != section.name) continue;
      out += "| `" + spec.path + "` | " + type_cell(spec.type) + " | `" + cell(format_value(spec.default_value)) +
             "` | " + cell(allowed_cell(spec)) + " | " + cell(spec.doc) + " |\n";
    }
  }
  return out;
}

std::string resolved_data_dir(const DataConfig& data) {
  return data.dir.empty() ? env_string("GRADMESH_DATA_DIR") : data.dir;
}

}  // namespace gradmesh::train
