// The GPT end to end through the real binary, on a slice of Debian's
// fortunes: prepare-text, training that learns, the same weights on one
// process and on two workers, generation from the run, and the errors a
// mismatched config or prompt gets. Skips visibly when fortunes is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "parallel/trained_weights.h"
#include "train/zero_runs.h"
#include "run_command.h"

namespace gradmesh::testing {
namespace {

// A tiny GPT, quick on two cores.
const std::string kTiny =
    " --set model.kind=gpt --set data.format=tokens --set data.tokens=tokens --set model.n_layer=2"
    " --set model.n_head=2 --set model.n_embd=32 --set model.block_size=32 --set train.batch_size=8"
    " --set optim.name=adamw --set optim.lr=0.003 --set data.limit_test=16 --set data.shuffle=false"
    " --set train.threads=1 --set output.report=false --set output.trace_steps=0";

class GptEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kFortunes)) GTEST_SKIP() << "fortunes not installed (" << kFortunes << ")";
    const CommandResult r = run_gradmesh(std::string("data prepare-text --vocab char --input ") + kFortunes +
                                             " --output tokens",
                                         dir_.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  // `env`: assignments put before the command (NAME=value ...).
  CommandResult train(const std::string& run_id, const std::string& extra, const std::string& env = "") {
    return run_shell(env + " '" GRADMESH_BINARY "' train '" GRADMESH_SOURCE_DIR
                           "/examples/mlp.toml' --set output.run_id=" + run_id + kTiny + extra,
                     dir_.path());
  }
  TempDir dir_;
};

TEST_F(GptEndToEnd, LearnsTheCorpusAndGeneratesFromTheRun) {
  CommandResult r = train("learn", " --set train.max_steps=200");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Characters of English text: a model that learnt nothing scores log(vocab) ~ 4.4.
  const size_t at = r.out.find("validation loss ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double loss = std::stod(r.out.substr(at + 16));
  EXPECT_LT(loss, 2.9) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;

  const std::string gen = "generate runs/learn --prompt 'The ' --max-tokens 40 --seed 3";
  CommandResult a = run_gradmesh(gen, dir_.path());
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out.rfind("The ", 0), 0u) << a.out;
  EXPECT_GE(a.out.size(), 4u + 40u) << a.out;
  CommandResult b = run_gradmesh(gen, dir_.path());
  EXPECT_EQ(a.out, b.out) << "the same seed must give the same text";
  // A checkpoint directory works as well as the run directory.
  r = train("ckpt", " --set train.max_steps=4 --set checkpoint.every_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  CommandResult c = run_gradmesh("generate runs/ckpt/checkpoints/step-4 --prompt 'A' --max-tokens 5", dir_.path());
  EXPECT_EQ(c.exit_code, 0) << c.err;

  // A character the corpus never had is named.
  CommandResult bad = run_gradmesh("generate runs/learn --prompt 'snow \xE2\x98\x83' --max-tokens 5", dir_.path());
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("U+2603"), std::string::npos) << bad.err;
}

TEST_F(GptEndToEnd, SentencePieceSubwordsTrainAndGenerateText) {
  // A BPE vocabulary trained on a slice of fortunes (one file: quick), the model trained on its ids.
  const CommandResult p = run_gradmesh(std::string("data prepare-text --vocab sentencepiece --vocab-size 400 --input ") +
                                           kFortunes + " --output pieces --workers 2",
                                       dir_.path());
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("vocabulary of 400 (sentencepiece, trained)"), std::string::npos) << p.out;
  const CommandResult r = train("pieces", " --set data.tokens=pieces --set train.max_steps=20");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const CommandResult g = run_gradmesh("generate runs/pieces --prompt 'The cat' --max-tokens 12 --seed 1", dir_.path());
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("The cat", 0), 0u) << g.out;
  EXPECT_GT(g.out.size(), 12u) << "pieces decode to text: " << g.out;
  const CommandResult wrong = run_gradmesh("data prepare-text --vocab char --tokenizer-model x.model --output t", dir_.path());
  EXPECT_EQ(wrong.exit_code, 2) << wrong.err;
}

TEST_F(GptEndToEnd, TwoWorkersTrainTheSameWeightsAsOneProcess) {
  const std::string steps = " --set train.max_steps=6 --set train.eval_every_epoch=false";
  ASSERT_EQ(train("one", steps).exit_code, 0);
  ASSERT_EQ(train("again", steps).exit_code, 0);
  CommandResult two = train("two", steps + " --nproc-per-node 2");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const std::vector<float> one = weights_of(dir_.file("runs/one/model.safetensors"));
  EXPECT_EQ(one, weights_of(dir_.file("runs/again/model.safetensors"))) << "same config, same weights, bit for bit";
  // The same windows, summed in another order: equal to rounding.
  EXPECT_LE(relative_difference(weights_of(dir_.file("runs/two/model.safetensors")), one), 1e-5);
}

// Windows come from (seed, epoch, index) and dropout masks from (seed, step,
// layer, sample): a run stopped after a checkpoint and resumed draws exactly
// what an uninterrupted one does.
TEST_F(GptEndToEnd, AResumedRunEndsBitIdenticalToAnUninterruptedOne) {
  const std::string common = " --set train.eval_every_epoch=false --set model.dropout=0.1";
  ASSERT_EQ(train("whole", common + " --set train.max_steps=8").exit_code, 0);
  ASSERT_EQ(train("parts", common + " --set train.max_steps=4 --set checkpoint.every_steps=4").exit_code, 0);
  CommandResult resumed = train("parts", common + " --set train.max_steps=8 --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming from"), std::string::npos) << resumed.err;
  EXPECT_TRUE(read_text(dir_.file("runs/whole/model.safetensors")) ==
              read_text(dir_.file("runs/parts/model.safetensors")));
}

// The own kernels' copies for each instruction-set level train the same
// bits, with fused multiply-adds (the default) and without
// (train.portable_numerics); the two modes are near, not equal.
TEST_F(GptEndToEnd, EveryInstructionSetLevelTrainsTheSameBitsInBothNumerics) {
  const std::string steps = " --set train.max_steps=6 --set train.eval_every_epoch=false";
  std::vector<float> by_mode[2];
  for (const bool portable : {false, true}) {
    const std::string mode = std::string(" --set train.portable_numerics=") + (portable ? "true" : "false");
    const std::string tag = portable ? "portable" : "fused";
    for (const char* level : {"avx512", "avx2", "baseline"}) {
      const CommandResult r = train(tag + "-" + level, steps + mode, std::string("GRADMESH_MAX_CPU_ISA=") + level);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_NE(r.err.find(portable ? "no fused multiply-add" : ", fused multiply-add"), std::string::npos) << r.err;
      if (std::string(level) == "baseline") {
        EXPECT_NE(r.err.find("own kernels: baseline"), std::string::npos) << r.err;
      }
      const std::vector<float> w = weights_of(dir_.file("runs/" + tag + "-" + level + "/model.safetensors"));
      if (by_mode[portable].empty()) {
        by_mode[portable] = w;
      } else {
        EXPECT_EQ(w, by_mode[portable]) << tag << " at " << level;
      }
    }
  }
  EXPECT_NE(by_mode[0], by_mode[1]);
  EXPECT_LE(relative_difference(by_mode[0], by_mode[1]), 1e-4);

  const CommandResult bad = train("bad-isa", steps, "GRADMESH_MAX_CPU_ISA=avx1024");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("GRADMESH_MAX_CPU_ISA"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("avx1024"), std::string::npos) << bad.err;
}

// A CPU without AVX-512 (emulated: oneDNN and the own kernels capped at
// AVX2) has no oneDNN bf16 matmul: bf16 runs multiply bf16 values through
// OpenBLAS instead, say so, and train as the native bf16 run does (their
// sums go in another order, so losses agree, not bits).
TEST_F(GptEndToEnd, Bf16WithoutOneDnnBf16MultipliesBf16ValuesThroughOpenBlas) {
  const std::string bf16 = " --set train.max_steps=20 --set train.eval_every_epoch=false --set train.precision=\"bf16\"";
  const CommandResult native = train("native", bf16);
  ASSERT_EQ(native.exit_code, 0) << native.err;
  const CommandResult avx2 = train("avx2", bf16, "ONEDNN_MAX_CPU_ISA=AVX2 GRADMESH_MAX_CPU_ISA=avx2");
  ASSERT_EQ(avx2.exit_code, 0) << avx2.err;
  EXPECT_NE(avx2.err.find("this CPU has no bf16 dot products"), std::string::npos) << avx2.err;
  const auto loss = [&](const std::string& id) {
    return last_metrics_line(dir_.file("runs/" + id), "summary")["final_train_loss"].get<double>();
  };
  EXPECT_NEAR(loss("avx2"), loss("native"), 1e-2 * loss("native"));
  ASSERT_EQ(train("f32", " --set train.max_steps=20 --set train.eval_every_epoch=false").exit_code, 0);
  EXPECT_NE(loss("avx2"), loss("f32")) << "the fallback multiplied unrounded values";
}

TEST_F(GptEndToEnd, MismatchedModelAndDataAreConfigErrors) {
  CommandResult r = run_gradmesh("train '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set model.kind=gpt", dir_.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.kind"), std::string::npos) << r.err;
  r = train("missing", " --set data.tokens=no-such-dir");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no-such-dir"), std::string::npos) << r.err;
  r = train("heads", " --set model.n_head=3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.n_embd"), std::string::npos) << r.err;
  r = train("context", " --set model.block_size=100000");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model.block_size"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace gradmesh::testing
