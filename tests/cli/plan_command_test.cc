// gradmesh plan through the real binary: the reference MLP's layouts on 4
// workers, one named best; a memory limit nothing fits under; bad flags.
// Skips visibly without the dataset.
#include <gtest/gtest.h>

#include "cli/run_command.h"

namespace gradmesh::testing {
namespace {

class PlanCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed (" << kDataDir << ")";
  }
  TempDir dir_;
};

const std::string kPlan = "plan '" GRADMESH_SOURCE_DIR "/examples/mlp.toml' --set data.limit_train=1024";

TEST_F(PlanCommand, ListsEveryLayoutWithMemoryAndTimeAndNamesTheBest) {
  const CommandResult r = run_gradmesh(kPlan + " --workers 4 --bandwidth 1gbit --latency 50us --memory-limit 4GiB",
                                       dir_.path());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  for (const char* layout : {"| dp=4 |", "| dp=4 zero=1 |", "| dp=4 zero=2 |", "| dp=4 zero=3 |"})
    EXPECT_NE(r.out.find(layout), std::string::npos) << layout << "\n" << r.out;
  EXPECT_NE(r.out.find("1gbit links, 50us latency, memory limit 4096.0 MiB per rank"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nbest: dp=4"), std::string::npos) << r.out;
}

TEST_F(PlanCommand, ALimitNoLayoutFitsIsAConfigErrorWithTheNumbers) {
  const CommandResult r = run_gradmesh(kPlan + " --workers 2 --memory-limit 64KiB", dir_.path());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.out.find("no: "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no layout on 2 workers fits; the smallest needs"), std::string::npos) << r.err;
}

TEST_F(PlanCommand, FlagsItCannotUseAreNamed) {
  expect_usage_errors(kPlan,
                      {
                          {"--workers 4 --mesh dp=3", "dp x pp x tp = 3, not --workers 4"},
                          {"--workers 4 --mesh xp=2", "expected dp=D,pp=P,tp=T"},
                          {"--workers 4 --memory-limit 16", "--memory-limit '16'"},
                          {"--workers 4 --bandwidth 1gb", "--bandwidth '1gb'"},
                          {"--workers 4 --latency 5", "--latency '5'"},
                          {"--workers 1000", "1000 workers need train.batch_size >= that"},
                      },
                      dir_.path());
}

}  // namespace
}  // namespace gradmesh::testing
