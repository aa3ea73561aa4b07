// The training loop itself, in process: every rank runs run_training() on a
// thread of this test over a real shared-memory process group, so each
// data-parallel strategy (DDP buckets, bf16 on the wire, ZeRO 1-3, local SGD,
// PowerSGD) is checked against one process without starting a launcher or a
// worker, and the sanitizer runs see the whole loop. What the launcher adds
// (processes, rendezvous, restarts) is tested through the binary in
// tests/parallel and tests/cli.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <chrono>
#include <thread>
#include <filesystem>
#include <fstream>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/data/idx.h"
#include "gradmesh/data/image_codec.h"
#include "gradmesh/data/mds.h"
#include "gradmesh/data/prepare_images.h"
#include "gradmesh/train/trainer.h"
#include "parallel/trained_weights.h"
#include "support/temp_dir.h"

namespace gradmesh::train {
namespace {

using gradmesh::testing::relative_difference;
using gradmesh::testing::weights_of;

// The reference MLP, small: 1000 samples in batches of 64 give a short last
// batch (40), so uneven slices are exercised too.
const std::vector<std::string> kSmallMlp = {
    "model.hidden=[64,32]", "train.epochs=4", "train.max_steps=30",
    "train.batch_size=64",  "train.eval_every_epoch=false", "train.threads=1", "output.trace_steps=0",
    "output.report=false",  "parallel.first_bucket_mb=0.01", "parallel.bucket_mb=0.05"};

// Runs that differ only in how a global batch is split agree to rounding.
constexpr double kOtherSplitTolerance = 1e-5;

// Writes the first `count` entries of the IDX file `from` to `to`, uncompressed.
void write_idx_prefix(const std::string& from, const std::string& to, int64_t count) {
  data::IdxArray a = data::read_idx(from);
  const int64_t per_entry = static_cast<int64_t>(a.values.size()) / a.dims[0];
  a.dims[0] = std::min(a.dims[0], count);
  std::string bytes = {0, 0, 0x08, static_cast<char>(a.dims.size())};
  for (const int64_t d : a.dims)
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>((d >> shift) & 0xff));
  bytes.append(reinterpret_cast<const char*>(a.values.data()), static_cast<size_t>(a.dims[0] * per_entry));
  std::ofstream(to, std::ios::binary) << bytes;
}

class TrainingLoop : public ::testing::Test {
 protected:
  // Every rank of every run reads the data set: the first 1000 training and
  // 200 test samples of Fashion-MNIST, written once, keep that quick (the
  // sanitizer runs most of all).
  static void SetUpTestSuite() {
    if (!gradmesh::testing::have_dataset()) return;
    data_ = std::make_unique<gradmesh::testing::TempDir>();
    const std::string from = gradmesh::testing::kDataDir;
    for (const auto& [name, count] : std::vector<std::pair<std::string, int64_t>>{
             {"train-images-idx3-ubyte", 1000}, {"train-labels-idx1-ubyte", 1000},
             {"t10k-images-idx3-ubyte", 200}, {"t10k-labels-idx1-ubyte", 200}})
      write_idx_prefix(from + "/" + name + ".gz", data_->file(name), count);
  }
  static void TearDownTestSuite() { data_.reset(); }
  void SetUp() override {
    if (!gradmesh::testing::have_dataset())
      GTEST_SKIP() << "dataset-fashion-mnist not installed at " << gradmesh::testing::kDataDir;
  }

  // `example` (examples/<name>.toml) with kSmallMlp's settings for the MLP and `extra`.
  Config config(const std::string& run_id, const std::vector<std::string>& extra = {},
                const std::string& example = "mlp") const {
    std::vector<std::string> sets = example == "mlp" ? kSmallMlp : std::vector<std::string>{};
    sets.insert(sets.end(), extra.begin(), extra.end());
    for (const char* set : {"train_images=train-images-idx3-ubyte", "train_labels=train-labels-idx1-ubyte",
                            "test_images=t10k-images-idx3-ubyte", "test_labels=t10k-labels-idx1-ubyte"})
      sets.push_back(std::string("data.") + set);
    sets.push_back("data.dir=" + data_->path());
    sets.push_back("output.dir=" + dir_.file("runs"));
    sets.push_back("output.run_id=" + run_id);
    return load_config(GRADMESH_SOURCE_DIR "/examples/" + example + ".toml", sets);
  }

  // Trains on `world` ranks, each a thread of this process over one shm
  // group (world 1: no group at all, as a plain `gradmesh train`), and
  // returns the weights rank 0 saved.
  std::vector<float> train(const Config& config, int world) {
    std::vector<TrainSummary> summaries(static_cast<size_t>(world));
    if (world == 1) {
      summaries[0] = run_training(config, quiet_.get());
    } else {
      auto store = std::make_shared<comm::FileStore>(dir_.file("store-" + config.output.run_id));
      const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
        auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(60'000));
        summaries[static_cast<size_t>(rank)] = run_training(config, quiet_.get(), group);
      });
      EXPECT_EQ(comm::testing::join_errors(errors), "") << config.output.run_id;
    }
    last_ = summaries[0];
    EXPECT_EQ(last_.world_size, world);
    if (last_.weights_path.empty() || !std::filesystem::exists(last_.weights_path)) {
      ADD_FAILURE() << config.output.run_id << ": no weights saved";
      return {};
    }
    return weights_of(last_.weights_path);
  }

  static std::unique_ptr<gradmesh::testing::TempDir> data_;
  gradmesh::testing::TempDir dir_;
  // Rank 0's progress lines, not wanted in the test's output.
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet_{std::fopen("/dev/null", "w"), &std::fclose};
  TrainSummary last_;  // rank 0's summary of the last train()
};

std::unique_ptr<gradmesh::testing::TempDir> TrainingLoop::data_;

TEST_F(TrainingLoop, DataParallelRanksMatchOneProcess) {
  const std::vector<float> one = train(config("one"), 1);
  ASSERT_FALSE(one.empty());
  EXPECT_EQ(last_.steps, 30);
  const int64_t samples = last_.samples;
  EXPECT_GT(samples, 0);
  for (int n : {2, 3, 4}) {
    const std::vector<float> many = train(config("dp" + std::to_string(n)), n);
    EXPECT_LE(relative_difference(many, one), kOtherSplitTolerance) << n << " ranks";
    EXPECT_EQ(last_.steps, 30) << n << " ranks";
    EXPECT_EQ(last_.samples, samples) << n << " ranks";
  }
}

TEST_F(TrainingLoop, CnnRanksMatchOneProcess) {
  const std::vector<std::string> small_cnn = {
      "model.channels=[4,8]", "model.fc_hidden=16", "data.drop_last=false", "data.limit_train=300",
      "train.max_steps=8",    "train.batch_size=32", "train.eval_every_epoch=false", "train.threads=1",
      "output.trace_steps=0", "output.report=false"};
  const std::vector<float> one = train(config("cnn1", small_cnn, "cnn"), 1);
  ASSERT_FALSE(one.empty());
  EXPECT_LE(relative_difference(train(config("cnn2", small_cnn, "cnn"), 2), one), kOtherSplitTolerance);
  // conv2 with 8 input channels takes the Winograd path (autograd/conv_op.cc),
  // which rounds more than a direct sum: one process splitting its batch into
  // micro-batches already ends ~1e-4 away from one that does not. The ranks
  // are compared with one process splitting the batch the same way, which
  // isolates what data parallelism adds: nothing beyond rounding.
  std::vector<std::string> winograd = small_cnn;
  winograd[0] = "model.channels=[8,8]";
  std::vector<std::string> split = winograd;
  split.push_back("train.accum_steps=2");
  const std::vector<float> one_split = train(config("winograd1", split, "cnn"), 1);
  EXPECT_LE(relative_difference(train(config("winograd2", winograd, "cnn"), 2), one_split), kOtherSplitTolerance);
}

TEST_F(TrainingLoop, AccumulationMatchesAndOverlapOrARerunChangeNoBit) {
  const std::vector<float> one = train(config("one"), 1);
  const std::vector<float> accumulated = train(config("accum", {"train.accum_steps=3"}), 2);
  EXPECT_LE(relative_difference(accumulated, one), kOtherSplitTolerance);
  // The same buckets reduced in the same order: bit for bit, with or without overlap, and on a rerun.
  EXPECT_EQ(train(config("serial", {"train.accum_steps=3", "parallel.overlap=false"}), 2), accumulated);
  EXPECT_EQ(train(config("again", {"train.accum_steps=3"}), 2), accumulated);
}

TEST_F(TrainingLoop, SameSeedGivesBitIdenticalWeights) {
  // Dropout draws from the counter RNG; bit-identity is promised for the same
  // config, and the BLAS thread count is part of it (OpenBLAS splits sums
  // differently per thread count), so each pair shares it.
  auto run = [&](const std::string& id, int seed, int threads, int world) {
    return train(config(id, {"model.dropout=0.1", "train.max_steps=20", "train.seed=" + std::to_string(seed),
                             "train.threads=" + std::to_string(threads)}),
                 world);
  };
  const std::vector<float> first = run("a", 0, 1, 1);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(run("b", 0, 1, 1), first) << "same seed, one thread";
  const std::vector<float> two_threads = run("c", 0, 2, 1);
  EXPECT_EQ(run("d", 0, 2, 1), two_threads) << "same seed, two threads";
  EXPECT_NE(run("e", 1, 1, 1), first) << "another seed must change the weights";
  const std::vector<float> ranks = run("f", 0, 1, 3);
  EXPECT_EQ(run("g", 0, 1, 3), ranks) << "same seed, three ranks";
}

TEST_F(TrainingLoop, ShardedImagesTrainLikeIdxFiles) {
  // The same samples as MDS shards (small ones: many shards), read sample by sample.
  const std::string train_set = dir_.file("train-set"), test_set = dir_.file("test-set");
  data::prepare_images_from_idx(data_->file("train-images-idx3-ubyte"), data_->file("train-labels-idx1-ubyte"),
                                train_set, 64 << 10);
  data::prepare_images_from_idx(data_->file("t10k-images-idx3-ubyte"), data_->file("t10k-labels-idx1-ubyte"),
                                test_set, 64 << 10);
  // One permutation of the whole set, as the IDX path draws it (not the shard-aware blocks).
  const std::vector<std::string> sharded = {"data.format=\"mds\"", "data.train_set=" + train_set,
                                            "data.test_set=" + test_set, "train.eval_every_epoch=true",
                                            "data.shuffle_block_shards=0"};
  for (int world : {1, 3}) {
    const std::vector<float> idx = train(config("idx" + std::to_string(world), {"train.eval_every_epoch=true"}), world);
    const double idx_accuracy = last_.test_accuracy;
    ASSERT_FALSE(idx.empty());
    EXPECT_EQ(train(config("mds" + std::to_string(world), sharded), world), idx) << world << " ranks";
    EXPECT_EQ(last_.test_accuracy, idx_accuracy) << world << " ranks";
  }
  // The shard-aware order (the default for MDS) is another order, the same at every world size.
  std::vector<std::string> blocks = sharded;
  blocks.back() = "data.shuffle_block_shards=2";
  const std::vector<float> one = train(config("blocks1", blocks), 1);
  ASSERT_FALSE(one.empty());
  EXPECT_NE(one, train(config("global1", sharded), 1));
  EXPECT_LE(relative_difference(train(config("blocks3", blocks), 3), one), kOtherSplitTolerance);
}

// The first 1000 training images as JPEGs in MDS shards of 64 KiB (16 shards).
void write_jpeg_set(const gradmesh::testing::TempDir& data, const std::string& set) {
  const data::IdxArray x = data::read_idx(data.file("train-images-idx3-ubyte"));
  const data::IdxArray y = data::read_idx(data.file("train-labels-idx1-ubyte"));
  data::MdsWriter writer(set, {{"x", "jpeg", std::nullopt}, {"y", "int", std::nullopt}}, 64 << 10);
  for (size_t i = 0; i < 1000; ++i) {
    const std::string jpeg = data::encode_jpeg(x.values.data() + i * 784, data::ImageSize{1, 28, 28}, 90);
    const int64_t label = y.values[i];
    writer.add({jpeg, std::string_view(reinterpret_cast<const char*>(&label), sizeof label)});
  }
  writer.finish();
}

std::vector<std::string> cnn_from_set(const std::string& set) {
  return {"model.channels=[4,8]", "model.fc_hidden=16", "data.limit_train=300", "train.max_steps=8",
          "train.batch_size=32",  "train.eval_every_epoch=false", "train.threads=1", "output.trace_steps=0",
          "output.report=false",  "data.format=\"mds\"", "data.train_set=" + set, "data.crop_padding=4",
          "data.flip=true"};
}

TEST_F(TrainingLoop, CnnFromJpegShardsWithAugmentationIsTheSameAtAnyWorkerCount) {
  const std::string set = dir_.file("jpeg-set");
  write_jpeg_set(*data_, set);
  const std::vector<std::string> cnn = cnn_from_set(set);
  const std::vector<float> one = train(config("aug-w1", cnn, "cnn"), 1);
  ASSERT_FALSE(one.empty());
  std::vector<std::string> workers = cnn;
  workers.push_back("data.workers=3");
  EXPECT_EQ(train(config("aug-w3", workers, "cnn"), 1), one) << "the loader's workers change no bit";
  EXPECT_LE(relative_difference(train(config("aug-r2", workers, "cnn"), 2), one), kOtherSplitTolerance)
      << "two ranks see the same augmented samples";
  std::vector<std::string> plain = cnn;
  plain.resize(plain.size() - 2);
  EXPECT_NE(train(config("plain", plain, "cnn"), 1), one) << "augmentation changes what is trained on";
}

// The same set served by a static file server on loopback (Range requests,
// as nginx or a bucket answer them) trains the very same weights, through a
// cache smaller than the set.
TEST_F(TrainingLoop, CnnFromShardsOverHttpIsTheSameAsFromTheDirectory) {
  const std::string set = dir_.file("jpeg-set");
  write_jpeg_set(*data_, set);
  httplib::Server server;
  server.set_mount_point("/sets/jpeg", set);
  server.set_tcp_nodelay(true);
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  for (int i = 0; i < 2000 && !server.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const std::vector<float> local = train(config("local", cnn_from_set(set), "cnn"), 1);
  std::vector<std::string> remote = cnn_from_set("http://127.0.0.1:" + std::to_string(port) + "/sets/jpeg");
  remote.push_back("data.cache_mb=1");
  const std::vector<float> over_http = train(config("http", remote, "cnn"), 2);
  server.stop();
  serving.join();
  ASSERT_FALSE(local.empty());
  EXPECT_LE(relative_difference(over_http, local), kOtherSplitTolerance);
}

TEST_F(TrainingLoop, Bf16OnTheWireStaysCloseButIsRounded) {
  const std::vector<float> f32 = train(config("f32"), 2);
  const std::vector<float> bf16 = train(config("bf16", {"parallel.comm_dtype=\"bf16\""}), 2);
  ASSERT_FALSE(bf16.empty());
  EXPECT_NE(bf16, f32);
  EXPECT_LE(relative_difference(bf16, f32), 0.05);
}

// train.precision = "bf16": the products in bf16 with float32 sums, the
// weights float32. A rerun gives the same bits, a resume from a step-20
// checkpoint ends on the uninterrupted run's bits, and the weights stay
// close to float32 training's but are not its.
TEST_F(TrainingLoop, Bf16ProductsRerunAndResumeBitIdenticalAndStayCloseToFloat32) {
  const std::vector<std::string> bf16 = {"train.precision=\"bf16\""};
  const std::vector<float> once = train(config("bf16-a", bf16), 1);
  ASSERT_FALSE(once.empty());
  EXPECT_EQ(train(config("bf16-b", bf16), 1), once) << "a rerun";
  const double bf16_loss = last_.final_train_loss;
  const std::vector<float> f32 = train(config("f32"), 1);
  EXPECT_NE(once, f32);
  // Each product rounds its operands to 8 significant bits; over 30 steps of
  // this small net the largest weight difference grows to about a tenth of
  // the largest weight (a wrong product would be of the weights' own size),
  // while the loss stays where float32's is.
  EXPECT_LE(relative_difference(once, f32), 0.25);
  EXPECT_NEAR(bf16_loss, last_.final_train_loss, 0.05 * last_.final_train_loss);

  std::vector<std::string> stopped = bf16;
  stopped.insert(stopped.end(), {"train.max_steps=20", "checkpoint.every_steps=10", "checkpoint.async=false"});
  train(config("bf16-stop", stopped), 1);
  RunOptions resume;
  resume.resume = "auto";
  const TrainSummary resumed = run_training(config("bf16-stop", bf16), quiet_.get(), nullptr, resume);
  ASSERT_FALSE(resumed.weights_path.empty());
  EXPECT_EQ(weights_of(resumed.weights_path), once) << "resumed at step 20";
  // The precision is the run's: a float32 run after a bf16 one multiplies in float32 again.
  EXPECT_EQ(train(config("f32-again"), 1), f32);
}

// bf16 products under ZeRO: the shards reduce and update float32 as the
// whole buffer does, so stage 3 on two ranks trains plain data
// parallelism's bf16 weights, and again the same bits on a rerun.
TEST_F(TrainingLoop, Bf16ProductsUnderZeroStageThreeTrainPlainDataParallelismsWeights) {
  const std::vector<std::string> bf16 = {"train.precision=\"bf16\"", "train.max_steps=8"};
  const std::vector<float> plain = train(config("bf16-dp", bf16), 2);
  ASSERT_FALSE(plain.empty());
  std::vector<std::string> zero = bf16;
  zero.push_back("parallel.zero=3");
  const std::vector<float> sharded = train(config("bf16-z3", zero), 2);
  EXPECT_LE(relative_difference(sharded, plain), 1e-6);
  EXPECT_EQ(train(config("bf16-z3-again", zero), 2), sharded);
}

TEST_F(TrainingLoop, ZeroStagesTrainTheWeightsOfPlainDataParallelism) {
  const std::vector<std::string> clipped = {"optim.clip_grad_norm=1.0", "optim.weight_decay=0.001",
                                            "train.accum_steps=2", "train.max_steps=8"};
  for (int n : {2, 3}) {
    const std::vector<float> plain = train(config("plain" + std::to_string(n), clipped), n);
    ASSERT_FALSE(plain.empty());
    for (int stage : {1, 2, 3}) {
      std::vector<std::string> sets = clipped;
      sets.push_back("parallel.zero=" + std::to_string(stage));
      const std::string id = "z" + std::to_string(stage) + "n" + std::to_string(n);
      // The shards' norms and updates sum in another order than the whole buffer's.
      EXPECT_LE(relative_difference(train(config(id, sets), n), plain), 1e-6) << id;
    }
  }
}

TEST_F(TrainingLoop, LocalSgdAndPowerSgdTrainAndRerunBitIdentical) {
  const std::vector<float> one = train(config("one"), 1);
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{"parallel.local_steps=4", "parallel.outer_lr=0.7", "parallel.outer_momentum=0.9"},
        std::vector<std::string>{"parallel.compression=\"powersgd\"", "parallel.powersgd_rank=2"}}) {
    const std::string id = sets[0].substr(std::string("parallel.").size(), 5);
    const std::vector<float> first = train(config(id + "a", sets), 2);
    ASSERT_FALSE(first.empty()) << id;
    EXPECT_EQ(train(config(id + "b", sets), 2), first) << id;
    // Another algorithm than exact data parallelism: it trains, but not the weights of one process.
    EXPECT_NE(first, one) << id;
    EXPECT_TRUE(std::isfinite(last_.final_train_loss)) << id;
  }
}

}  // namespace
}  // namespace gradmesh::train
