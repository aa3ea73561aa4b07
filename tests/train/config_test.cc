#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gradmesh/core/error.h"
#include "gradmesh/train/config.h"
#include "gradmesh/train/config_schema.h"

namespace gradmesh::train {
namespace {

// The message of the kConfig error that parsing `text` must raise.
std::string config_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(text, "cfg.toml", overrides);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::string(GRADMESH_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in) << relative;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(Config, EmptyFileGivesDefaults) {
  Config c = parse_config("", "empty.toml");
  EXPECT_EQ(c.model.kind, "mlp");
  EXPECT_EQ(c.model.classes, 10);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{512, 512}));
  EXPECT_EQ(c.model.activation, "relu");
  EXPECT_EQ(c.model.dropout, 0.0);
  EXPECT_EQ(c.model.channels, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(c.model.kernel_size, 3);
  EXPECT_EQ(c.model.fc_hidden, 128);
  EXPECT_EQ(c.model.init, "default");
  EXPECT_EQ(c.data.dir, "");
  EXPECT_EQ(c.data.train_images, "train-images-idx3-ubyte.gz");
  EXPECT_EQ(c.data.test_labels, "t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(c.data.scale, 1.0 / 255.0);
  EXPECT_EQ(c.data.std, 1.0);
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_FALSE(c.data.drop_last);
  EXPECT_EQ(c.data.prefetch, 2);
  EXPECT_EQ(c.optim.name, "sgd");
  EXPECT_EQ(c.optim.lr, 0.05);
  EXPECT_EQ(c.optim.momentum, 0.9);
  EXPECT_EQ(c.optim.beta2, 0.999);
  EXPECT_EQ(c.optim.eps, 1e-8);
  EXPECT_EQ(c.schedule.kind, "constant");
  EXPECT_EQ(c.schedule.step_size, 1000);
  EXPECT_EQ(c.schedule.gamma, 0.1);
  EXPECT_EQ(c.train.epochs, 1);
  EXPECT_EQ(c.train.batch_size, 128);
  EXPECT_EQ(c.train.seed, 0u);
  EXPECT_EQ(c.train.accum_steps, 1);
  EXPECT_EQ(c.train.threads, 1);
  EXPECT_EQ(c.train.log_every, 50);
  EXPECT_TRUE(c.train.eval_every_epoch);
  EXPECT_EQ(c.output.dir, "runs");
  EXPECT_TRUE(c.output.save_weights);
  EXPECT_EQ(c.output.weights_dtype, "F32");
  // Default-constructed structs take the same defaults from the schema.
  EXPECT_EQ(Config(), c);
  OptimConfig optim;
  EXPECT_EQ(optim.lr, 0.05);
}

TEST(Config, SchemaDefaultsAreValidAndDocumented) {
  for (const KeySpec& spec : config_schema()) {
    int64_t index = 0;
    EXPECT_EQ(check_value(spec, spec.default_value, &index), "") << spec.path;
    EXPECT_EQ(static_cast<int>(spec.default_value.index()), static_cast<int>(spec.type)) << spec.path;
    EXPECT_FALSE(spec.doc.empty()) << spec.path;
    EXPECT_TRUE(is_section(spec.section)) << spec.path;
    EXPECT_EQ(find_key(spec.path), &spec);
  }
  EXPECT_EQ(find_key("optim.lrr"), nullptr);
}

const char* kEveryKey = R"(
[model]
kind = "cnn"
classes = 100
hidden = []
activation = "gelu"
dropout = 0.25
channels = [8, 16, 32]
kernel_size = 5
fc_hidden = 64
recompute = true
init = "kaiming_uniform"
[data]
dir = "/data/fm"
train_images = "a"
train_labels = "b"
test_images = "c"
test_labels = "d"
scale = 0.5
mean = 0.2860
std = 0.3530
shuffle = false
drop_last = true
prefetch = 1
limit_train = 1000
limit_test = 500
[optim]
name = "adamw"
lr = 1
momentum = 0.5
dampening = 0.1
nesterov = false
weight_decay = 0.01
beta1 = 0.8
beta2 = 0.99
eps = 1e-6
clip_grad_norm = 1.5
[schedule]
kind = "cosine"
warmup_steps = 100
step_size = 7
gamma = 1.0
min_lr = 0.001
[train]
epochs = 3
batch_size = 64
seed = 9223372036854775807
max_steps = 10
accum_steps = 4
threads = 0
log_every = 1
eval_every_epoch = false
init_from = "w.safetensors"
[parallel]
zero = 2
[output]
dir = "out"
run_id = "r1"
save_weights = false
weights_dtype = "BF16"
)";

TEST(Config, EveryKeyIsRead) {
  Config c = parse_config(kEveryKey, "every.toml");
  EXPECT_EQ(c.model.kind, "cnn");
  EXPECT_EQ(c.model.classes, 100);
  EXPECT_TRUE(c.model.hidden.empty());
  EXPECT_EQ(c.model.activation, "gelu");
  EXPECT_EQ(c.model.dropout, 0.25);
  EXPECT_EQ(c.model.channels, (std::vector<int64_t>{8, 16, 32}));
  EXPECT_EQ(c.model.kernel_size, 5);
  EXPECT_EQ(c.model.fc_hidden, 64);
  EXPECT_EQ(c.model.init, "kaiming_uniform");
  EXPECT_TRUE(c.model.recompute);
  EXPECT_EQ(c.parallel.zero, 2);
  EXPECT_EQ(c.data.dir, "/data/fm");
  EXPECT_EQ(c.data.train_images, "a");
  EXPECT_EQ(c.data.train_labels, "b");
  EXPECT_EQ(c.data.test_images, "c");
  EXPECT_EQ(c.data.test_labels, "d");
  EXPECT_EQ(c.data.scale, 0.5);
  EXPECT_EQ(c.data.mean, 0.2860);
  EXPECT_EQ(c.data.std, 0.3530);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_TRUE(c.data.drop_last);
  EXPECT_EQ(c.data.prefetch, 1);
  EXPECT_EQ(c.data.limit_train, 1000);
  EXPECT_EQ(c.data.limit_test, 500);
  EXPECT_EQ(c.optim.name, "adamw");
  EXPECT_EQ(c.optim.lr, 1.0);  // a TOML integer is fine for a float key
  EXPECT_EQ(c.optim.momentum, 0.5);
  EXPECT_EQ(c.optim.dampening, 0.1);
  EXPECT_FALSE(c.optim.nesterov);
  EXPECT_EQ(c.optim.weight_decay, 0.01);
  EXPECT_EQ(c.optim.beta1, 0.8);
  EXPECT_EQ(c.optim.beta2, 0.99);
  EXPECT_EQ(c.optim.eps, 1e-6);
  EXPECT_EQ(c.optim.clip_grad_norm, 1.5);
  EXPECT_EQ(c.schedule.kind, "cosine");
  EXPECT_EQ(c.schedule.warmup_steps, 100);
  EXPECT_EQ(c.schedule.step_size, 7);
  EXPECT_EQ(c.schedule.gamma, 1.0);
  EXPECT_EQ(c.schedule.min_lr, 0.001);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.train.batch_size, 64);
  EXPECT_EQ(c.train.seed, 9223372036854775807ull);
  EXPECT_EQ(c.train.max_steps, 10);
  EXPECT_EQ(c.train.accum_steps, 4);
  EXPECT_EQ(c.train.threads, 0);
  EXPECT_EQ(c.train.log_every, 1);
  EXPECT_FALSE(c.train.eval_every_epoch);
  EXPECT_EQ(c.train.init_from, "w.safetensors");
  EXPECT_EQ(c.output.dir, "out");
  EXPECT_EQ(c.output.run_id, "r1");
  EXPECT_FALSE(c.output.save_weights);
  EXPECT_EQ(c.output.weights_dtype, "BF16");
  // Sections may also be written as inline tables.
  EXPECT_EQ(parse_config("optim = { lr = 0.5 }", "x").optim.lr, 0.5);
}

TEST(Config, BoundariesAreInclusiveOrExclusiveAsDocumented) {
  Config c = parse_config(
      "[model]\ndropout = 0.0\nkernel_size = 7\n[optim]\nmomentum = 0.0\n[schedule]\ngamma = 1\n"
      "[data]\nprefetch = 64\n",
      "x");
  EXPECT_EQ(c.model.kernel_size, 7);
  EXPECT_EQ(c.schedule.gamma, 1.0);
  EXPECT_EQ(c.data.prefetch, 64);
}

TEST(Config, ToTomlParsesBackIdentical) {
  for (const char* text : {"", kEveryKey}) {
    Config c = parse_config(text, "x");
    std::string toml = config_to_toml(c);
    EXPECT_EQ(parse_config(toml, "resolved.toml"), c) << toml;
    EXPECT_EQ(config_to_toml(parse_config(toml, "resolved.toml")), toml);
    for (const KeySpec& spec : config_schema())
      EXPECT_NE(toml.find("\n" + spec.path.substr(spec.section.size() + 1) + " = "), std::string::npos) << spec.path;
  }
  // Awkward values survive the trip bit for bit.
  Config c;
  c.data.dir = "dir with \"quotes\", back\\slash, tab\t, newline\n, \x01 and \xc3\xa9";
  c.data.scale = 1.0 / 3.0;
  c.data.mean = -1e-300;
  c.optim.lr = 1e-300;
  c.model.hidden = {};
  c.train.seed = 123456789012345ull;
  Config back = parse_config(config_to_toml(c), "x");
  EXPECT_EQ(back, c);
  EXPECT_NE(config_to_toml(back), config_to_toml(Config()));
}

TEST(Config, FormatValue) {
  EXPECT_EQ(format_value(KeyValue(1.0)), "1.0");
  EXPECT_EQ(format_value(KeyValue(0.05)), "0.05");
  EXPECT_EQ(format_value(KeyValue(-2.0)), "-2.0");
  EXPECT_EQ(format_value(KeyValue(1e-8)), "1e-08");
  EXPECT_EQ(format_value(KeyValue(int64_t{-3})), "-3");
  EXPECT_EQ(format_value(KeyValue(true)), "true");
  EXPECT_EQ(format_value(KeyValue(std::vector<int64_t>{1, 2})), "[1, 2]");
  EXPECT_EQ(format_value(KeyValue(std::string("a\"b"))), "\"a\\\"b\"");
}

TEST(ConfigErrors, UnknownKeySuggestsTheClosest) {
  EXPECT_EQ(config_error("[optim]\nlrr = 0.1\n"), "cfg.toml: unknown key 'optim.lrr' (did you mean 'optim.lr'?)");
  EXPECT_EQ(config_error("[train]\nlr = 0.1\n"), "cfg.toml: unknown key 'train.lr' (did you mean 'optim.lr'?)");
  std::string far = config_error("[model]\nwibble = 1\n");
  EXPECT_NE(far.find("unknown key 'model.wibble'"), std::string::npos) << far;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_EQ(closest_name("optimizer", {"model", "optim", "train"}), "optim");
  EXPECT_EQ(closest_name("modle", {"model", "optim", "train"}), "model");
  EXPECT_EQ(closest_name("zzzzzz", {"model", "optim", "train"}), "");
}

TEST(ConfigErrors, UnknownSectionAndMisplacedKeys) {
  std::string section = config_error("[optimizer]\nlr = 0.1\n");
  EXPECT_NE(section.find("cfg.toml: unknown section [optimizer] (did you mean [optim]?)"), std::string::npos) << section;
  std::string top = config_error("lr = 0.1\n");
  EXPECT_NE(top.find("cfg.toml: unknown key 'lr' at the top level"), std::string::npos) << top;
  EXPECT_NE(top.find("'optim.lr'"), std::string::npos) << top;
  EXPECT_EQ(config_error("model = 3\n"), "cfg.toml: model: expected a table (a [model] section), got an integer");
  std::string nested = config_error("[model.extra]\nx = 1\n");
  EXPECT_NE(nested.find("unknown key 'model.extra'"), std::string::npos) << nested;
}

TEST(ConfigErrors, WrongType) {
  EXPECT_EQ(config_error("[train]\nepochs = \"two\"\n"), "cfg.toml: train.epochs: expected an integer, got a string");
  EXPECT_EQ(config_error("[train]\nepochs = 1.5\n"), "cfg.toml: train.epochs: expected an integer, got a float");
  EXPECT_EQ(config_error("[optim]\nlr = \"fast\"\n"), "cfg.toml: optim.lr: expected a number, got a string");
  EXPECT_EQ(config_error("[data]\nshuffle = 1\n"), "cfg.toml: data.shuffle: expected a boolean (true or false), got an integer");
  EXPECT_EQ(config_error("[data]\ndir = 3\n"), "cfg.toml: data.dir: expected a string, got an integer");
  EXPECT_EQ(config_error("[model]\nhidden = 512\n"), "cfg.toml: model.hidden: expected an array of integers, got an integer");
  EXPECT_EQ(config_error("[model]\nhidden = [512, \"a\"]\n"), "cfg.toml: model.hidden[1]: expected an integer, got a string");
  EXPECT_EQ(config_error("[model]\nkind = 3\n"), "cfg.toml: model.kind: expected one of \"mlp\", \"cnn\", \"gpt\", got an integer");
}

TEST(ConfigErrors, OutOfRange) {
  EXPECT_EQ(config_error("[optim]\nlr = -1\n"), "cfg.toml: optim.lr: expected a number in (0, 1000000], got -1");
  EXPECT_EQ(config_error("[optim]\nlr = 0.0\n"), "cfg.toml: optim.lr: expected a number in (0, 1000000], got 0");
  EXPECT_EQ(config_error("[optim]\nlr = inf\n"), "cfg.toml: optim.lr: expected a finite number, got inf");
  EXPECT_EQ(config_error("[optim]\nmomentum = 1.0\n"), "cfg.toml: optim.momentum: expected a number in [0, 1), got 1");
  EXPECT_EQ(config_error("[schedule]\ngamma = 0\n"), "cfg.toml: schedule.gamma: expected a number in (0, 1], got 0");
  EXPECT_EQ(config_error("[data]\nstd = 0\n"), "cfg.toml: data.std: expected a number in (0, 1000000], got 0");
  EXPECT_EQ(config_error("[train]\nepochs = 0\n"), "cfg.toml: train.epochs: expected an integer in [1, 1000000], got 0");
  EXPECT_EQ(config_error("[train]\nseed = -1\n"), "cfg.toml: train.seed: expected an integer >= 0, got -1");
  EXPECT_EQ(config_error("[model]\nkernel_size = 8\n"), "cfg.toml: model.kernel_size: expected an integer in [1, 7], got 8");
  EXPECT_EQ(config_error("[data]\nprefetch = 65\n"), "cfg.toml: data.prefetch: expected an integer in [1, 64], got 65");
  EXPECT_EQ(config_error("[model]\nhidden = [512, 0]\n"), "cfg.toml: model.hidden[1]: expected an integer in [1, 1048576], got 0");
  EXPECT_EQ(config_error("[model]\nchannels = []\n"), "cfg.toml: model.channels: expected at least 1 entry, got an empty array");
}

// Numbers become byte counts, milliseconds, step counts and layer sizes:
// without an upper bound, 1e300 reached an int64 cast (undefined behaviour).
TEST(ConfigErrors, EveryNumberHasAnUpperBound) {
  for (const KeySpec& spec : config_schema()) {
    if (spec.type != KeyType::kInt && spec.type != KeyType::kFloat && spec.type != KeyType::kIntList) continue;
    if (spec.path == "train.seed") continue;  // any non-negative int64 is a seed
    EXPECT_TRUE(spec.constraint.hi.has_value()) << spec.path << " has no upper bound";
  }
  EXPECT_EQ(config_error("[parallel]\nbucket_mb = 1e300\n"),
            "cfg.toml: parallel.bucket_mb: expected a number in (0, 65536], got 1e+300");
  EXPECT_EQ(config_error("", {"parallel.first_bucket_mb=1e300"}),
            "--set parallel.first_bucket_mb=1e300: parallel.first_bucket_mb: expected a number in (0, 65536], got 1e+300");
  EXPECT_EQ(config_error("[parallel]\ntimeout_s = 1e300\n"),
            "cfg.toml: parallel.timeout_s: expected a number in [0, 604800], got 1e+300");
  EXPECT_EQ(config_error("[model]\nhidden = [512, 1048577]\n"),
            "cfg.toml: model.hidden[1]: expected an integer in [1, 1048576], got 1048577");
  EXPECT_EQ(config_error("[model]\nchannels = [9223372036854775807]\n"),
            "cfg.toml: model.channels[0]: expected an integer in [1, 1048576], got 9223372036854775807");
  EXPECT_EQ(config_error("[model]\nfc_hidden = 4294967296\n"),
            "cfg.toml: model.fc_hidden: expected an integer in [1, 1048576], got 4294967296");
  // epochs * steps per epoch stays far inside int64: at most 1e6 * 2^31.
  EXPECT_EQ(config_error("[train]\nepochs = 9223372036854775807\n"),
            "cfg.toml: train.epochs: expected an integer in [1, 1000000], got 9223372036854775807");
  EXPECT_EQ(config_error("[train]\nmax_steps = 1000000000001\n"),
            "cfg.toml: train.max_steps: expected an integer in [0, 1e+12], got 1000000000001");
  EXPECT_EQ(config_error("[train]\nthreads = 1025\n"), "cfg.toml: train.threads: expected an integer in [0, 1024], got 1025");
  EXPECT_EQ(config_error("[model]\nclasses = 1\n"), "cfg.toml: model.classes: expected an integer in [2, 1000000], got 1");
  // The largest values are accepted.
  const Config c = parse_config("[parallel]\nbucket_mb = 65536\ntimeout_s = 604800\n[train]\nepochs = 1000000\n"
                                "[model]\nhidden = [1048576]\nclasses = 1000000\n",
                                "x");
  EXPECT_EQ(c.parallel.bucket_mb, 65536.0);
  EXPECT_EQ(c.model.classes, 1000000);
}

TEST(ConfigErrors, BadChoice) {
  EXPECT_EQ(config_error("[model]\nkind = \"resnet\"\n"), "cfg.toml: model.kind: expected one of \"mlp\", \"cnn\", \"gpt\", got \"resnet\"");
  EXPECT_EQ(config_error("[output]\nweights_dtype = \"f32\"\n"),
            "cfg.toml: output.weights_dtype: expected one of \"F32\", \"BF16\", got \"f32\"");
}

TEST(ConfigErrors, SyntaxErrorNamesLineAndColumn) {
  std::string message = config_error("[optim]\nlr = 0.1\nmomentum = = 0.9\n");
  EXPECT_EQ(message.rfind("cfg.toml:3:", 0), 0u) << message;
  EXPECT_NE(message.find("invalid TOML"), std::string::npos) << message;
  EXPECT_NE(message.find("line 3"), std::string::npos) << message;
  std::string duplicate = config_error("[optim]\nlr = 0.1\n\nlr = 0.2\n");
  EXPECT_NE(duplicate.find("line 4"), std::string::npos) << duplicate;
}

TEST(ConfigErrors, AllProblemsInFileOrder) {
  // toml++ keeps keys sorted by name; the report must follow the file instead.
  std::string message = config_error("[train]\nepochs = 0\n[optim]\nlr = -1\n");
  size_t epochs = message.find("train.epochs"), lr = message.find("optim.lr");
  ASSERT_NE(epochs, std::string::npos) << message;
  ASSERT_NE(lr, std::string::npos) << message;
  EXPECT_LT(epochs, lr) << message;
  EXPECT_NE(message.find("\ncfg.toml: optim.lr"), std::string::npos) << message;
}

TEST(ConfigErrors, CrossKeyRules) {
  std::string cosine = config_error("[optim]\nlr = 0.01\n[schedule]\nkind = \"cosine\"\nmin_lr = 0.1\n");
  EXPECT_NE(cosine.find("schedule.min_lr: expected a number <= optim.lr (0.01)"), std::string::npos) << cosine;
  // min_lr only matters to the cosine schedule.
  EXPECT_EQ(parse_config("[optim]\nlr = 0.01\n[schedule]\nmin_lr = 0.1\n", "x").schedule.min_lr, 0.1);
  std::string nesterov = config_error("[optim]\nnesterov = true\nmomentum = 0.0\n");
  EXPECT_NE(nesterov.find("optim.nesterov"), std::string::npos) << nesterov;
  EXPECT_TRUE(parse_config("[optim]\nnesterov = true\n", "x").optim.nesterov);
}

TEST(ConfigErrors, ZeroStagesAndWhatZeroCannotBeCombinedWith) {
  EXPECT_EQ(Config().parallel.zero, 0);
  EXPECT_FALSE(Config().model.recompute);
  for (int stage : {0, 1, 2, 3}) EXPECT_EQ(parse_config("[parallel]\nzero = " + std::to_string(stage), "x").parallel.zero, stage);
  const std::string rebalance = config_error("[parallel]\nzero = 3\nstraggler = \"rebalance\"\n");
  EXPECT_NE(rebalance.find("parallel.straggler"), std::string::npos) << rebalance;
  const std::string four = config_error("[parallel]\nzero = 4\n");
  EXPECT_NE(four.find("parallel.zero"), std::string::npos) << four;
  const std::string bf16 = config_error("[parallel]\nzero = 1\ncomm_dtype = \"bf16\"\n");
  EXPECT_NE(bf16.find("parallel.comm_dtype"), std::string::npos) << bf16;
  const std::string recovery = config_error("[parallel]\nzero = 2\n[elastic]\nrecovery = \"in-process\"\n");
  EXPECT_NE(recovery.find("elastic.recovery: \"in-process\" cannot be combined with parallel.zero = 2"),
            std::string::npos)
      << recovery;
  // Plain data parallelism keeps both.
  const Config plain = parse_config("[parallel]\ncomm_dtype = \"bf16\"\n[elastic]\nrecovery = \"in-process\"\n", "x");
  EXPECT_EQ(plain.elastic.recovery, "in-process");
}

// parallel.mesh is a table inside [parallel]: inline, dotted or through --set;
// its keys round-trip through the resolved config, and a stray key is named in full.
TEST(ConfigMesh, InlineTableDottedKeysAndOverrides) {
  const Config defaults;
  EXPECT_EQ(defaults.parallel.mesh_dp, 0);
  EXPECT_EQ(defaults.parallel.mesh_pp, 1);
  EXPECT_EQ(defaults.parallel.mesh_tp, 1);
  const Config inline_table = parse_config("[parallel]\nmesh = { dp = 2, pp = 3, tp = 4 }\n", "x");
  EXPECT_EQ(inline_table.parallel.mesh_dp, 2);
  EXPECT_EQ(inline_table.parallel.mesh_pp, 3);
  EXPECT_EQ(inline_table.parallel.mesh_tp, 4);
  const Config dotted = parse_config("[parallel]\nmesh.pp = 2\n", "x", {"parallel.mesh.tp=2"});
  EXPECT_EQ(dotted.parallel.mesh_pp, 2);
  EXPECT_EQ(dotted.parallel.mesh_tp, 2);
  EXPECT_EQ(dotted.parallel.mesh_dp, 0);
  const std::string toml = config_to_toml(inline_table);
  EXPECT_NE(toml.find("mesh.pp = 3"), std::string::npos) << toml;
  EXPECT_EQ(parse_config(toml, "resolved.toml"), inline_table);
  const std::string stray = config_error("[parallel]\nmesh = { dp = 1, ppp = 2 }\n");
  EXPECT_NE(stray.find("unknown key 'parallel.mesh.ppp'"), std::string::npos) << stray;
  const std::string zero = config_error("[parallel]\nmesh = { tp = 0 }\n");
  EXPECT_NE(zero.find("parallel.mesh.tp"), std::string::npos) << zero;
  const std::string scalar = config_error("[parallel]\nmesh = 4\n");
  EXPECT_NE(scalar.find("parallel.mesh"), std::string::npos) << scalar;
}

TEST(ConfigOverrides, ValuesAreTomlOrBareStrings) {
  Config c = parse_config("[optim]\nlr = 0.3\n", "cfg.toml",
                          {"optim.lr=0.1", "model.hidden=[256,256]", "model.kind=cnn", "train.epochs=3",
                           "data.shuffle=false", "output.run_id=20240101", "data.dir=/tmp/a b",
                           "output.dir=\"quoted\"", " train.seed = 7", "optim.weight_decay=1"});
  EXPECT_EQ(c.optim.lr, 0.1);
  EXPECT_EQ(c.model.hidden, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(c.model.kind, "cnn");
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.output.run_id, "20240101");
  EXPECT_EQ(c.data.dir, "/tmp/a b");
  EXPECT_EQ(c.output.dir, "quoted");
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.optim.weight_decay, 1.0);
  // Later overrides win; unset keys keep the file's value.
  EXPECT_EQ(parse_config("[optim]\nlr = 0.3\n", "x", {"optim.lr=0.1", "optim.lr=0.2"}).optim.lr, 0.2);
  EXPECT_EQ(parse_config("[optim]\nlr = 0.3\n", "x", {"train.epochs=2"}).optim.lr, 0.3);
  EXPECT_EQ(parse_config("", "x", {"model.hidden=[]"}).model.hidden.size(), 0u);
}

TEST(ConfigOverrides, Errors) {
  EXPECT_EQ(config_error("", {"optim.lrr=1"}), "--set optim.lrr=1: unknown key 'optim.lrr' (did you mean 'optim.lr'?)");
  EXPECT_EQ(config_error("", {"optim.lr"}), "--set optim.lr: expected key=value, e.g. --set optim.lr=0.1");
  EXPECT_EQ(config_error("", {"=3"}), "--set =3: expected key=value, e.g. --set optim.lr=0.1");
  EXPECT_EQ(config_error("", {"optim.lr=-1"}), "--set optim.lr=-1: optim.lr: expected a number in (0, 1000000], got -1");
  EXPECT_EQ(config_error("", {"train.epochs=abc"}), "--set train.epochs=abc: train.epochs: expected an integer, got a string");
  EXPECT_EQ(config_error("", {"model.kind=resnet"}),
            "--set model.kind=resnet: model.kind: expected one of \"mlp\", \"cnn\", \"gpt\", got \"resnet\"");
  EXPECT_EQ(config_error("", {"model.hidden=[1,"}),
            "--set model.hidden=[1,: model.hidden: expected an array of integers, got a string");
  std::string section = config_error("", {"optim=1"});
  EXPECT_NE(section.find("'optim' is a section"), std::string::npos) << section;
  // A value cannot smuggle in extra keys.
  std::string smuggled = config_error("", {"train.epochs=2\nlr = 5"});
  EXPECT_NE(smuggled.find("expected an integer, got a string"), std::string::npos) << smuggled;
}

TEST(ConfigFiles, LoadReportsMissingFile) {
  try {
    load_config("/nonexistent/dir/cfg.toml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(std::string(e.what()).find("cannot open config file /nonexistent/dir/cfg.toml"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_config(GRADMESH_SOURCE_DIR), Error);
}

TEST(ConfigFiles, ExamplesAreTheReferenceWorkloads) {
  const std::string dir = std::string(GRADMESH_SOURCE_DIR) + "/examples/";
  Config mlp = load_config(dir + "mlp.toml");
  EXPECT_EQ(mlp.model.kind, "mlp");
  EXPECT_EQ(mlp.model.hidden, (std::vector<int64_t>{512, 512}));
  EXPECT_EQ(mlp.model.activation, "relu");
  Config cnn = load_config(dir + "cnn.toml");
  EXPECT_EQ(cnn.model.kind, "cnn");
  EXPECT_EQ(cnn.model.channels, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(cnn.model.kernel_size, 3);
  EXPECT_EQ(cnn.model.fc_hidden, 128);
  EXPECT_EQ(cnn.model.activation, "relu");
  for (const Config* c : {&mlp, &cnn}) {
    EXPECT_EQ(c->data.scale, 1.0 / 255.0);
    EXPECT_EQ(c->data.mean, 0.0);
    EXPECT_EQ(c->data.std, 1.0);
    EXPECT_TRUE(c->data.drop_last);
    EXPECT_EQ(c->train.batch_size, 128);
    EXPECT_EQ(c->train.epochs, 1);
    EXPECT_EQ(c->train.seed, 0u);
    EXPECT_EQ(c->optim.name, "sgd");
    EXPECT_EQ(c->optim.lr, 0.05);
    EXPECT_EQ(c->optim.momentum, 0.9);
    EXPECT_EQ(c->optim.weight_decay, 0.0);
    EXPECT_FALSE(c->optim.nesterov);
    EXPECT_EQ(c->schedule.kind, "constant");
    EXPECT_EQ(c->schedule.warmup_steps, 0);
  }
  EXPECT_EQ(load_config(dir + "mlp.toml", {"train.epochs=2"}).train.epochs, 2);
}

TEST(ConfigFiles, DocsMatchTheSchema) {
  std::string markdown = config_markdown();
  for (const KeySpec& spec : config_schema())
    EXPECT_NE(markdown.find("| `" + spec.path + "` |"), std::string::npos) << spec.path;
  std::string docs = read_source_file("docs/config.md");
  if (docs.find(markdown) == std::string::npos) {
    std::ofstream("config_markdown.generated.md") << markdown;
    ADD_FAILURE() << "docs/config.md is out of date: replace its tables with config_markdown(), written to "
                     "config_markdown.generated.md in the test's working directory";
  }
}

TEST(ConfigFiles, ResolvedDataDir) {
  DataConfig data;
  data.dir = "/explicit";
  EXPECT_EQ(resolved_data_dir(data), "/explicit");
  data.dir = "";
  ::setenv("GRADMESH_DATA_DIR", "/from/env", 1);
  EXPECT_EQ(resolved_data_dir(data), "/from/env");
  ::unsetenv("GRADMESH_DATA_DIR");
  EXPECT_EQ(resolved_data_dir(data), "/usr/share/datasets/fashion-mnist");
}

}  // namespace
}  // namespace gradmesh::train
