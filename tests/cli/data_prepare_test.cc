// gradmesh data prepare and gradmesh inspect on an MDS set, as a user runs
// them: Fashion-MNIST's test set becomes shards that verify; a damaged shard
// makes inspect exit 1 naming it; a set is never written over; a missing
// flag is a usage error (exit 2).
#include <gtest/gtest.h>

#include <fstream>

#include "run_command.h"

namespace gradmesh::testing {
namespace {

class DataPrepare : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_dataset()) GTEST_SKIP() << "dataset-fashion-mnist not installed at " << kDataDir;
  }
  CommandResult prepare(const std::string& output) {
    return run_gradmesh(std::string("data prepare --images ") + kDataDir + "/t10k-images-idx3-ubyte.gz --labels " +
                            kDataDir + "/t10k-labels-idx1-ubyte.gz --shard-mb 1 --output " + output,
                        dir_.path());
  }
  TempDir dir_;
};

TEST_F(DataPrepare, WritesShardsThatInspectVerifiesAndNamesADamagedOne) {
  const CommandResult p = prepare("test-set");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("test-set: 10000 samples in "), std::string::npos) << p.out;
  const CommandResult ok = run_gradmesh("inspect test-set", dir_.path());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("column x: ndarray:uint8:1,28,28 (784 bytes)"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("every shard verifies"), std::string::npos) << ok.out;

  {  // one pixel of shard 3 changes: the shard still parses, its checksum no longer matches
    std::fstream shard(dir_.file("test-set/shard.00003.mds"), std::ios::in | std::ios::out | std::ios::binary);
    shard.seekp(-100, std::ios::end);
    shard.put('\x7f');
  }
  const CommandResult bad = run_gradmesh("inspect test-set", dir_.path());
  EXPECT_EQ(bad.exit_code, 1);
  const size_t line = bad.out.find("shard.00003.mds: ");
  ASSERT_NE(line, std::string::npos) << bad.out;
  EXPECT_EQ(bad.out.find("BAD", line), bad.out.find("BAD")) << "only shard 3 fails: " << bad.out;
  EXPECT_NE(bad.out.find("BAD: xxh64"), std::string::npos) << bad.out;
  EXPECT_NE(bad.err.find("1 shard(s) of test-set do not verify"), std::string::npos) << bad.err;
}

TEST_F(DataPrepare, NeverWritesOverASetAndNeedsItsFlags) {
  ASSERT_EQ(prepare("set").exit_code, 0);
  const CommandResult again = prepare("set");
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("already holds a set"), std::string::npos) << again.err;
  const CommandResult missing = run_gradmesh("data prepare --output x", dir_.path());
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--images"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace gradmesh::testing
