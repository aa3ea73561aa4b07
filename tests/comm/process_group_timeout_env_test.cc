// create_process_group reads GRADMESH_COMM_TIMEOUT by the same rule as
// `gradmesh launch` (core/env.h), and only when the options name no timeout.
#include <gtest/gtest.h>

#include "support/scoped_env.h"
#include "support/temp_dir.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/process_group.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

using ::gradmesh::testing::ScopedEnv;
using ::gradmesh::testing::TempDir;

std::shared_ptr<ProcessGroup> one_rank_shm_group(const std::string& dir, std::optional<Millis> timeout) {
  ProcessGroupOptions options;
  options.backend = "shm";
  options.timeout = timeout;
  return create_process_group(std::make_shared<FileStore>(dir), 0, 1, options);
}

TEST(ProcessGroupTimeoutEnv, AFractionOfASecondIsAccepted) {
  // `gradmesh launch` always took 1.5; the process groups refused it.
  ScopedEnv timeout("GRADMESH_COMM_TIMEOUT", "1.5");
  ScopedEnv local_size("LOCAL_WORLD_SIZE", nullptr);
  TempDir dir;
  auto group = one_rank_shm_group(dir.path(), std::nullopt);
  EXPECT_TRUE(group->barrier()->wait());
}

TEST(ProcessGroupTimeoutEnv, InfinityIsRefusedNamingTheVariable) {
  ScopedEnv timeout("GRADMESH_COMM_TIMEOUT", "inf");
  ScopedEnv local_size("LOCAL_WORLD_SIZE", nullptr);
  TempDir dir;
  try {
    one_rank_shm_group(dir.path(), std::nullopt);
    FAIL() << "GRADMESH_COMM_TIMEOUT=inf accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_STREQ(e.what(),
                 "environment variable GRADMESH_COMM_TIMEOUT: expected a finite number in [0.001, 604800], got 'inf'");
  }
}

TEST(ProcessGroupTimeoutEnv, AnExplicitTimeoutLeavesTheVariableUnread) {
  // Even 300 s, which used to mean "unset" and sent creation to the variable.
  ScopedEnv timeout("GRADMESH_COMM_TIMEOUT", "not a number");
  ScopedEnv local_size("LOCAL_WORLD_SIZE", nullptr);
  TempDir dir;
  auto group = one_rank_shm_group(dir.path(), Millis{300'000});
  EXPECT_TRUE(group->barrier()->wait());
}

TEST(ProcessGroupTimeoutEnv, LocalWorldSizeZeroIsAUsageError) {
  ScopedEnv timeout("GRADMESH_COMM_TIMEOUT", nullptr);
  ScopedEnv local_size("LOCAL_WORLD_SIZE", "0");
  TempDir dir;
  try {
    one_rank_shm_group(dir.path(), std::nullopt);
    FAIL() << "LOCAL_WORLD_SIZE=0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("environment variable LOCAL_WORLD_SIZE"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradmesh::comm
