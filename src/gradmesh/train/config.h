// The training config: `gradmesh train CONFIG.toml [--set key=value ...]`.
//
// A TOML file is read into the plain structs below. Every key, its type,
// default, allowed values and one-line meaning are declared once, in the
// schema table (config_schema.cc); validation, the defaults these structs
// start with, and docs/config.md (config_markdown()) all come from that table,
// so adding a key means adding one line there and one member here.
//
// Values seen by the rest of gradmesh are always validated: a string key with
// a fixed set of choices holds one of them, numbers are inside their ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::train {

// Each section struct's default constructor fills every member with the
// schema default, so `ModelConfig m; m.kind = "cnn";` is a complete config.
// Every member must have a schema key: the constructors leave no other
// initialiser, and config_to_toml/parse_config only see keyed members.
struct ModelConfig {
  ModelConfig();
  std::string kind;             // "mlp" | "cnn" | "gpt"
  int64_t classes;              // output width; every label is in [0, classes)
  std::vector<int64_t> hidden;  // mlp hidden widths; empty = logistic regression
  std::string activation;       // "relu" | "gelu" | "tanh"
  double dropout;               // [0, 1), after each mlp hidden activation
  std::vector<int64_t> channels;  // cnn conv output channels, >= 1 entry
  int64_t kernel_size;          // cnn conv kernel, 1..7
  int64_t fc_hidden;            // cnn hidden linear width
  int64_t n_layer;              // gpt blocks
  int64_t n_head;               // gpt heads, divides n_embd
  int64_t n_embd;               // gpt width
  int64_t block_size;           // gpt context length
  int64_t vocab_size;           // gpt; 0 = the token set's
  bool tie_weights;             // gpt: lm_head shares the token embedding
  bool recompute;               // gpt: activation checkpointing of the blocks
  std::string init;             // "default" | "kaiming_normal" | "kaiming_uniform" | "xavier_uniform" | "xavier_normal"
  bool operator==(const ModelConfig&) const = default;
};

struct DataConfig {
  DataConfig();
  std::string format;  // "idx" (images, in memory) | "mds" (images, sharded) | "tokens" (language modelling)
  std::string tokens;  // token set directory (format = tokens)
  int64_t windows_per_epoch;  // 0 = train tokens / block_size
  std::string train_set;      // MDS set directories (format = mds)
  std::string test_set;
  bool verify_shards;
  std::string dir;  // "" = $GRADMESH_DATA_DIR (see resolved_data_dir)
  std::string train_images;
  std::string train_labels;
  std::string test_images;
  std::string test_labels;
  double scale;  // pixel = (byte * scale - mean) / std
  double mean;
  double std;    // > 0
  bool shuffle;
  bool drop_last;
  int64_t shuffle_block_shards;  // format = mds: shards per shuffle block; 0 = one global permutation
  int64_t prefetch;     // batches prepared ahead, 0 = no loader thread
  int64_t workers;      // loader threads filling each batch (reading, decoding, augmenting)
  int64_t crop_padding;  // format = mds, training set: random crop after padding by this much (0 = none)
  bool flip;             // format = mds, training set: random left-right flip
  int64_t cache_mb;      // format = mds over http(s): the reader's block cache
  int64_t limit_train;  // first N training samples, 0 = all
  int64_t limit_test;   // first N test samples, 0 = all
  bool operator==(const DataConfig&) const = default;
};

struct OptimConfig {
  OptimConfig();
  std::string name;  // "sgd" | "adamw"
  double lr;
  double momentum;   // sgd
  double dampening;  // sgd
  bool nesterov;     // sgd; requires momentum > 0 and dampening == 0
  double weight_decay;
  double beta1;  // adamw
  double beta2;  // adamw
  double eps;    // adamw
  double clip_grad_norm;  // 0 = no clipping
  bool operator==(const OptimConfig&) const = default;
};

struct ScheduleConfig {
  ScheduleConfig();
  std::string kind;  // "constant" | "step" | "cosine"
  int64_t warmup_steps;
  int64_t step_size;  // step
  double gamma;       // step
  double min_lr;      // cosine; <= optim.lr
  bool operator==(const ScheduleConfig&) const = default;
};

struct TrainConfig {
  TrainConfig();
  int64_t epochs;
  int64_t batch_size;   // global batch size (all ranks, all micro-steps)
  uint64_t seed;        // TOML integers are int64, so at most 2^63 - 1
  int64_t max_steps;    // 0 = no limit
  int64_t accum_steps;  // micro-steps per optimizer step
  int64_t threads;      // 0 = all cores
  std::string precision;  // "fp32" | "bf16": what the matrix products multiply in (kernels::MatmulPrecision)
  bool portable_numerics;  // own kernels without fused multiply-add (kernels/isa.h)
  int64_t log_every;
  bool eval_every_epoch;
  std::string init_from;  // safetensors file, "" = random init from seed
  bool operator==(const TrainConfig&) const = default;
};

// How the ranks of a data-parallel job cooperate (ignored by a single process).
struct ParallelConfig {
  ParallelConfig();
  std::string backend;       // "auto" | "shm" | "gloo" | "hier" | "mpi"
  double bucket_mb;          // gradient bucket size (MiB)
  double first_bucket_mb;    // the first bucket (the last layers), smaller so communication starts early
  std::string comm_dtype;    // "f32" | "bf16": the element type gradients travel in
  bool overlap;              // start each bucket's all-reduce during backward (false: all after backward)
  double timeout_s;          // every collective's timeout; 0 = the process group's (GRADMESH_COMM_TIMEOUT)
  double slow_rank_factor;   // flag a rank whose step time exceeds the median by this factor
  std::string straggler;     // "none" | "rebalance": shift batch samples away from slow ranks every parallel.rebalance_every steps
  int64_t rebalance_every;   // steps between split decisions with straggler = "rebalance"
  int64_t zero;              // ZeRO stage: 0 plain data parallel, 1 optimizer state, 2 also gradients, 3 also parameters
  int64_t mesh_dp;           // parallel.mesh.dp: data-parallel degree; 0 = world / (pp x tp)
  int64_t mesh_pp;           // parallel.mesh.pp: pipeline stages
  int64_t mesh_tp;           // parallel.mesh.tp: tensor-parallel degree
  int64_t micro_batches;     // pipeline: micro-batches per step on each data-parallel rank
  std::string pipeline_schedule;  // "1f1b" | "gpipe"
  std::string compression;   // "none" | "powersgd": how gradients travel (docs/scaling.md)
  int64_t powersgd_rank;     // columns of PowerSGD's factors
  int64_t powersgd_start_step;  // exact all-reduces before this step
  int64_t local_steps;       // > 1: local SGD / DiLoCo, parameters synchronised every N steps instead of gradients every step
  double outer_lr;           // local steps: the outer step's learning rate on the averaged parameter change
  double outer_momentum;     // local steps: Nesterov momentum of the outer step (0: plain averaging)
  bool operator==(const ParallelConfig&) const = default;
};

struct OutputConfig {
  OutputConfig();
  std::string dir;     // run directories are created under here
  std::string run_id;  // "" = a fresh id chosen when the run starts
  bool save_weights;
  std::string weights_dtype;  // "F32" | "BF16"
  int64_t trace_steps;        // steps recorded in trace.rank<R>.json (0 = no trace)
  bool report;                // write report.html
  bool operator==(const OutputConfig&) const = default;
};

// When and where the run saves checkpoints (checkpoint/: <dir>/step-<N>/).
struct CheckpointConfig {
  CheckpointConfig();
  int64_t every_steps;    // 0 = not by step count
  double every_seconds;   // 0 = not by time
  int64_t keep_last;      // committed checkpoints kept (0 = all)
  bool async;             // snapshot in memory, write in the background
  std::string dir;        // "" = <run>/checkpoints
  bool operator==(const CheckpointConfig&) const = default;
};

// How a launched job recovers when a worker fails.
struct ElasticConfig {
  ElasticConfig();
  std::string recovery;  // "restart" (from the latest checkpoint) | "in-process" (survivors re-form the group)
  bool operator==(const ElasticConfig&) const = default;
};

// What the resources a run consumes cost (obs/metering.h). The defaults
// are examples, and every output that shows a cost says so until the
// config names a price.
struct MeteringConfig {
  MeteringConfig();
  std::string currency;
  double price_per_core_hour;  // CPU core-seconds, as getrusage counts them
  double price_per_gb_month;   // checkpoint bytes kept on disk
  double price_per_gb_egress;  // bytes sent to processes on other hosts
  bool example_prices;         // the prices are the built-in examples (false once the config sets one)
  bool operator==(const MeteringConfig&) const = default;
};

struct Config {
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  ScheduleConfig schedule;
  TrainConfig train;
  ParallelConfig parallel;
  OutputConfig output;
  CheckpointConfig checkpoint;
  ElasticConfig elastic;
  MeteringConfig metering;
  bool operator==(const Config&) const = default;
};

// Reads and parses the file at `path` (messages name it as given).
// Throws Error(kConfig) when the file cannot be opened or is invalid.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});

// Parses TOML text; `source_name` prefixes every message ("cfg.toml: ...").
// `overrides` are "key=value" strings from --set, applied in order on top of
// the file: the value is read as a TOML value (0.1, [256, 256], true,
// "text"); a bare word that is not valid TOML, or any value for a string key
// that is not a quoted TOML string, is taken as the literal string.
// Throws Error(kConfig) naming the file (or the --set) and the full key.
Config parse_config(const std::string& toml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});

// Every key of the schema as Markdown tables, one per section (docs/config.md).
std::string config_markdown();

// The resolved config as TOML: every key including defaults, in schema order,
// with a fixed number format, so equal configs give byte-identical text (it is
// saved as <run>/config.toml and hashed to check that all ranks agree).
// parse_config(config_to_toml(c), ...) == c.
std::string config_to_toml(const Config& config);

// xxh64 (16 hex digits) of the config keys that decide the weights a run
// produces: everything but how it is run (threads, logging, parallel,
// output, checkpoint and elastic sections). A checkpoint records it so a
// resume with different maths is noticed.
std::string training_config_hash(const Config& config);

// data.dir, or $GRADMESH_DATA_DIR (with its declared default) when it is "".
std::string resolved_data_dir(const DataConfig& data);

}  // namespace gradmesh::train
