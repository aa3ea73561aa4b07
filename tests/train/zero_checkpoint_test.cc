// Sharded checkpoints in real runs, through the real binary: a ZeRO run
// writes one optimizer shard per rank; it resumes at the same world size and
// stage bit-identical to an uninterrupted run, and at another world size or
// stage (including plain data parallelism and one process) within rounding
// of it; --resume auto and time-based saves work under ZeRO; gradmesh
// export consolidates a sharded checkpoint into the files a whole one holds.
// Skips visibly without the fortunes corpus.
#include <gtest/gtest.h>

#include "gradmesh/checkpoint/safetensors.h"
#include "train/zero_runs.h"

namespace gradmesh::testing {
namespace {

// Another world size sums each gradient element in another order (see
// tests/cli/zero_training_test.cc).
constexpr double kOtherWorldTolerance = 1e-4;

const std::string kEvery3 = " --set checkpoint.every_steps=3 --set checkpoint.keep_last=0";

nlohmann::json trainer_json(const GptWorkspace& ws, const std::string& step_dir) {
  return nlohmann::json::parse(read_file(ws.file(step_dir + "/trainer.json")));
}

class ZeroCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ws_.available()) GTEST_SKIP() << "fortunes not installed (" << kFortunes << ")";
  }
  void train_ok(const std::string& id, const std::string& extra) {
    const CommandResult r = ws_.train(id, extra);
    ASSERT_EQ(r.exit_code, 0) << id << ": " << r.err;
  }
  GptWorkspace ws_;
};

TEST_F(ZeroCheckpoint, AShardedCheckpointResumesAtAnyWorldSizeAndStage) {
  train_ok("full", " --set train.max_steps=6" + world(2, 2));
  train_ok("first", " --set train.max_steps=3" + kEvery3 + world(2, 2));
  const std::string step3 = "runs/first/checkpoints/step-3";
  for (const char* file : {"/model.safetensors", "/optimizer.shard-00001-of-00002.safetensors",
                           "/optimizer.shard-00002-of-00002.safetensors"})
    EXPECT_TRUE(std::filesystem::exists(ws_.file(step3 + file))) << file;
  EXPECT_FALSE(std::filesystem::exists(ws_.file(step3 + "/optimizer.safetensors")));
  EXPECT_EQ(trainer_json(ws_, step3)["zero_stage"], 2);
  EXPECT_EQ(trainer_json(ws_, step3)["world_size"], 2);

  const std::string resume = " --set train.max_steps=6 --resume " + step3;
  train_ok("same", resume + world(2, 2));
  EXPECT_EQ(ws_.weights("same"), ws_.weights("full")) << "the same world size and stage: bit for bit";
  struct Other {
    const char* id;
    int nproc, zero;
  };
  for (const Other& o : {Other{"three", 3, 1}, Other{"plain", 2, 0}, Other{"one", 0, 0}}) {
    train_ok(o.id, resume + world(o.nproc, o.zero));
    EXPECT_LE(relative_difference(ws_.weights(o.id), ws_.weights("full")), kOtherWorldTolerance) << o.id;
  }
  const nlohmann::json resumed = last_metrics_line(ws_.file("runs/three"), "resume");
  EXPECT_EQ(resumed["checkpoint_world_size"], 2);
  EXPECT_EQ(resumed["world_size"], 3);
  EXPECT_EQ(resumed["checkpoint_zero_stage"], 2);
}

TEST_F(ZeroCheckpoint, ResumeAutoAndTimeBasedSavesWorkUnderZero) {
  train_ok("uninterrupted", " --set train.max_steps=6" + world(3, 1));
  // Every rank's clock says a save is due at every step; the ranks vote, so all save together.
  // Synchronous saves: a background save still in flight at the next step would make it not due yet.
  train_ok("auto", " --set train.max_steps=3 --set checkpoint.every_seconds=0.001 --set checkpoint.keep_last=0"
                   " --set checkpoint.async=false" + world(3, 1));
  // (Step 1 may start within the first millisecond; steps 2 and 3 take longer than that.)
  const nlohmann::json first = last_metrics_line(ws_.file("runs/auto"), "summary");
  EXPECT_GE(first["checkpoints_saved"].get<int>(), 2) << first.dump();
  EXPECT_EQ(first["checkpoints_failed"], 0) << first.dump();
  for (int step = 2; step <= 3; ++step)
    EXPECT_TRUE(std::filesystem::exists(
        ws_.file("runs/auto/checkpoints/step-" + std::to_string(step) + "/optimizer.shard-00003-of-00003.safetensors")));
  train_ok("auto", " --set train.max_steps=6 --resume auto" + world(3, 1));
  EXPECT_EQ(last_metrics_line(ws_.file("runs/auto"), "resume")["step"], 3);
  EXPECT_EQ(ws_.weights("auto"), ws_.weights("uninterrupted"));
}

TEST_F(ZeroCheckpoint, AWholeCheckpointResumesUnderZeroAndExportMatchesTheShardedOne) {
  // Stage 2 and plain data parallelism at the same world size train the same bits (shm).
  train_ok("whole", " --set train.max_steps=6" + kEvery3 + world(2, 0));
  train_ok("sharded", " --set train.max_steps=3" + kEvery3 + world(2, 2));
  train_ok("rezero", " --set train.max_steps=6 --resume runs/whole/checkpoints/step-3" + world(2, 1));
  EXPECT_EQ(ws_.weights("rezero"), ws_.weights("whole"));

  for (const char* id : {"whole", "sharded"}) {
    const CommandResult r = run_gradmesh(std::string("export runs/") + id + "/checkpoints/step-3 --output " + id +
                                             ".safetensors --with-optimizer",
                                         ws_.dir().path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(std::string(id) + ".optimizer.safetensors"), std::string::npos) << r.out;
  }
  EXPECT_EQ(weights_of(ws_.file("sharded.safetensors")),
            weights_of(ws_.file("runs/whole/checkpoints/step-3/model.safetensors")));
  // The consolidated shards hold exactly the tensors of the whole checkpoint's optimizer.safetensors.
  const auto whole = checkpoint::read_safetensors(ws_.file("runs/whole/checkpoints/step-3/optimizer.safetensors"));
  const auto exported = checkpoint::read_safetensors(ws_.file("sharded.optimizer.safetensors"));
  ASSERT_EQ(exported.tensors.size(), whole.tensors.size());
  for (const checkpoint::NamedTensor& t : whole.tensors) {
    const Tensor* got = exported.find(t.name);
    ASSERT_NE(got, nullptr) << t.name;
    EXPECT_EQ(got->shape(), t.tensor.shape()) << t.name;
    EXPECT_EQ(got->to_vector(), t.tensor.to_vector()) << t.name;
  }
  EXPECT_EQ(exported.metadata.at("optimizer"), "adamw");
  EXPECT_EQ(weights_of(ws_.file("whole.optimizer.safetensors")), weights_of(ws_.file("sharded.optimizer.safetensors")));

  // The exported weights are a model file like any other.
  const CommandResult gen = run_gradmesh("generate sharded.safetensors --config runs/sharded/config.toml --prompt 'A' "
                                         "--max-tokens 3",
                                         ws_.dir().path());
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  const CommandResult missing = run_gradmesh("export runs/none -o x.safetensors", ws_.dir().path());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("runs/none"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace gradmesh::testing
