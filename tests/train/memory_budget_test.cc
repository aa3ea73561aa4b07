// The memory estimate of a rank, the limits a process runs under (cgroup
// files in a scratch tree standing in for /sys/fs/cgroup), and the check
// that stops a run which cannot fit.
#include <gtest/gtest.h>

#include <filesystem>

#include "gradmesh/core/error.h"
#include "gradmesh/train/memory_budget.h"
#include "support/temp_dir.h"

namespace gradmesh::train {
namespace {

using gradmesh::testing::TempDir;

TEST(MemoryBudget, GptActivationsFollowTheDocumentedFormula) {
  nn::GptSpec s;
  s.vocab_size = 10, s.block_size = 4, s.n_layer = 2, s.n_head = 2, s.n_embd = 8;
  // block 18*8 + 2 + 4 = 150, head 4*8 + 2 + 2*10 = 54: 4 bytes * 3 rows * 4 tokens * (2*150 + 54).
  EXPECT_EQ(gpt_activation_bytes(s, 3), 4 * 3 * 4 * (2 * 150 + 54));
  s.recompute = true;  // (L + 1) * C + one block
  EXPECT_EQ(gpt_activation_bytes(s, 3), 4 * 3 * 4 * (3 * 8 + 150 + 54));
  s.recompute = false;
  s.dropout = 0.1f;  // + 2.5C per block and 1.25C at the embeddings
  EXPECT_EQ(gpt_activation_bytes(s, 1), 4 * 1 * 4 * (2 * (150 + 20) + 54 + 10));
}

TEST(MemoryBudget, TheStageShardsStateOnlyWithSeveralRanks) {
  Config c;
  c.model.kind = "gpt";
  c.model.n_layer = 1, c.model.n_head = 1, c.model.n_embd = 8, c.model.block_size = 4;
  c.optim.name = "adamw";
  c.parallel.zero = 2;
  c.train.batch_size = 10;
  c.train.accum_steps = 2;
  const InputGeometry tokens{0, 0, 0, 10};
  const MemoryEstimate one = estimate_rank_memory(c, tokens, 1000, 1);
  EXPECT_EQ(one.stage, 0);  // one process ignores parallel.zero
  EXPECT_EQ(one.state.total_bytes(), 4 * (1000 + 1000 + 2000));
  EXPECT_EQ(micro_batch_rows(c.train, 1), 5);
  const MemoryEstimate four = estimate_rank_memory(c, tokens, 1000, 4);
  EXPECT_EQ(four.stage, 2);
  EXPECT_EQ(four.state.params_bytes, 4000);
  EXPECT_EQ(four.state.grads_bytes, 1000);
  EXPECT_EQ(four.state.optimizer_bytes, 2000);
  EXPECT_EQ(micro_batch_rows(c.train, 4), 2);  // ceil(ceil(10 / 4) / 2)
  EXPECT_EQ(four.activation_bytes, gpt_activation_bytes(gpt_spec(c.model, tokens), 2));
  EXPECT_NE(four.describe().find("(ZeRO stage 2, 4 ranks)"), std::string::npos) << four.describe();
  Config mlp;
  mlp.model.hidden = {100};
  mlp.train.batch_size = 3;
  EXPECT_EQ(estimate_rank_memory(mlp, {1, 28, 28}, 10, 1).activation_bytes, 4 * 3 * (2 * 100 + 2 * 10));
}

TEST(MemoryBudget, SplitLayersAndPipelineStagesCountTheirOwnPart) {
  nn::GptSpec s;
  s.vocab_size = 10, s.block_size = 4, s.n_layer = 2, s.n_head = 2, s.n_embd = 8;
  // tp 2: block 6*8 + 4 + (12*8 + 2) / 2 = 101, ends 3*8 + (8 + 2 + 2*10 / 2) = 44.
  EXPECT_EQ(gpt_activation_bytes(s, 3, 2), 4 * 3 * 4 * (2 * 101 + 44));
  // Stages: the first keeps its block and the embeddings (3C), the last its block, ln_f and the head.
  s.stage = nn::GptStage{0, 2, 0, 1};
  EXPECT_EQ(gpt_activation_bytes(s, 3), 4 * 3 * 4 * (150 + 24));
  const int64_t first = nn::gpt_parameter_count(s);
  s.stage = nn::GptStage{1, 2, 1, 2};
  EXPECT_EQ(gpt_activation_bytes(s, 3), 4 * 3 * 4 * (150 + 30));
  const int64_t last = nn::gpt_parameter_count(s);
  s.stage = {};
  // The tied head's table is counted on both ends, the rest once.
  EXPECT_EQ(first + last, nn::gpt_parameter_count(s) + 10 * 8);

  Config c;
  c.model.kind = "gpt";
  c.model.n_layer = 2, c.model.n_head = 2, c.model.n_embd = 8, c.model.block_size = 4;
  c.optim.name = "sgd";
  c.train.batch_size = 8;
  c.parallel.micro_batches = 4;
  const InputGeometry tokens{0, 0, 0, 10};
  // pp 2 under 1F1B: stage 0 holds 2 micro-batches of 2 rows at once, stage 1 one.
  const MemoryEstimate pp = estimate_rank_memory(c, tokens, parallel::MeshShape{1, 2, 1});
  EXPECT_EQ(pp.pipeline_stage, 0);
  nn::GptSpec stage0 = gpt_spec(c.model, tokens);
  stage0.stage = nn::GptStage{0, 2, 0, 1};
  EXPECT_EQ(pp.activation_bytes, 2 * gpt_activation_bytes(stage0, 2));
  EXPECT_EQ(pp.state.params_bytes, 4 * nn::gpt_parameter_count(stage0));
  EXPECT_NE(pp.describe().find("pipeline stage 0 of 2"), std::string::npos) << pp.describe();
  // GPipe: every stage holds all 4 micro-batches, so the last (with the head) holds the most.
  c.parallel.pipeline_schedule = "gpipe";
  const MemoryEstimate gpipe = estimate_rank_memory(c, tokens, parallel::MeshShape{1, 2, 1});
  nn::GptSpec stage1 = gpt_spec(c.model, tokens);
  stage1.stage = nn::GptStage{1, 2, 1, 2};
  EXPECT_EQ(gpipe.pipeline_stage, 1);
  EXPECT_EQ(gpipe.activation_bytes, 4 * gpt_activation_bytes(stage1, 2));
  // tp 2 over dp 2: the split block and head, rows of this dp rank.
  const MemoryEstimate tp = estimate_rank_memory(c, tokens, parallel::MeshShape{2, 1, 2});
  EXPECT_EQ(tp.activation_bytes, gpt_activation_bytes(gpt_spec(c.model, tokens), 4, 2));
  EXPECT_EQ(tp.state.params_bytes, 4 * nn::gpt_parameter_count(gpt_spec(c.model, tokens), 2));
  EXPECT_NE(tp.describe().find("tp 2"), std::string::npos) << tp.describe();
}

class CgroupTree : public ::testing::Test {
 protected:
  void put(const std::string& relative, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(dir_.file(relative)).parent_path());
    dir_.write(relative, text);
  }
  CgroupMounts mounts() const { return {{dir_.file("v2")}, dir_.file("v1mem")}; }
  TempDir dir_;
};

TEST_F(CgroupTree, TheTightestLimitAlongThePathWinsAndMaxIsNone) {
  put("v2/job/memory.max", "1048576\n");
  put("v2/job/rank/memory.max", "max\n");
  const std::optional<MemoryLimit> v2 = cgroup_memory_limit("0::/job/rank\n", mounts());
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->bytes, 1048576);
  EXPECT_TRUE(v2->shared);
  EXPECT_NE(v2->source.find(dir_.file("v2/job/memory.max")), std::string::npos) << v2->source;
  EXPECT_FALSE(cgroup_memory_limit("0::/elsewhere\n", mounts()).has_value());

  // cgroup v1 (a hybrid host): the memory controller's line; its "unlimited" is a huge number.
  put("v1mem/a/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_FALSE(cgroup_memory_limit("4:memory:/a\n0::/\n", mounts()).has_value());
  put("v1mem/a/b/memory.limit_in_bytes", "5000\n");
  const std::optional<MemoryLimit> v1 = cgroup_memory_limit("5:cpu,memory:/a/b\n0::/job\n", mounts());
  ASSERT_TRUE(v1.has_value());
  EXPECT_EQ(v1->bytes, 5000);  // tighter than v2's 1 MiB of /job
  EXPECT_NE(v1->source.find("memory.limit_in_bytes"), std::string::npos) << v1->source;
  // Lines of other controllers and garbage are ignored.
  EXPECT_FALSE(cgroup_memory_limit("3:cpu:/a/b\nnot a line\n", mounts()).has_value());
}

std::string fit_error(const MemoryEstimate& e, const MemoryLimit& limit, int local_ranks) {
  try {
    check_memory_fits(e, limit, local_ranks);
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::kConfig);
    return error.what();
  }
  return "";
}

TEST(MemoryBudget, AnEstimateAboveTheLimitIsAConfigErrorSayingWhatToChange) {
  MemoryEstimate e;
  e.state = parallel::zero_memory_per_rank(0, 1 << 20, 1, 2);  // 16 MiB
  e.activation_bytes = 1 << 20;
  const MemoryLimit as{16 << 20, "RLIMIT_AS (ulimit -v, prlimit --as)", false};
  const std::string message = fit_error(e, as, 4);
  EXPECT_NE(message.find("= 17.0 MiB per rank (ZeRO stage 0, 1 rank)"), std::string::npos) << message;
  EXPECT_NE(message.find("exceeds the memory limit of 16.0 MiB from RLIMIT_AS"), std::string::npos) << message;
  EXPECT_NE(message.find("parallel.zero = 1, 2 or 3"), std::string::npos) << message;
  EXPECT_EQ(fit_error(e, {18 << 20, "RLIMIT_AS", false}, 4), "");  // a process limit is per process
  EXPECT_NO_THROW(check_memory_fits(e, std::nullopt, 1));
  // A cgroup's limit holds every rank of the node.
  const std::string shared = fit_error(e, {50 << 20, "cgroup memory.max (/x/memory.max)", true}, 4);
  EXPECT_NE(shared.find("times the 4 ranks of this node that share the limit (68.0 MiB)"), std::string::npos) << shared;
  EXPECT_EQ(fit_error(e, {50 << 20, "cgroup memory.max", true}, 2), "");
}

}  // namespace
}  // namespace gradmesh::train
