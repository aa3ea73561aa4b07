// Turning the [parallel] section into reducer options: numbers are checked
// where they become integers, also when the config was filled in code.
#include <gtest/gtest.h>

#include <cmath>

#include "gradmesh/core/error.h"
#include "gradmesh/train/rank_setup.h"

namespace gradmesh::train {
namespace {

std::string options_error(const ParallelConfig& config) {
  try {
    reducer_options(config);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(ReducerOptions, ConvertsMebibytesAndSeconds) {
  ParallelConfig c;
  c.bucket_mb = 2.5;
  c.first_bucket_mb = 1e-9;  // rounds to 0 bytes: one byte is the least
  c.timeout_s = 604800;
  c.comm_dtype = "bf16";
  const parallel::ReducerOptions o = reducer_options(c);
  EXPECT_EQ(o.bucket_bytes, 2621440);
  EXPECT_EQ(o.first_bucket_bytes, 1);
  EXPECT_EQ(o.timeout, comm::Millis(604'800'000));
  EXPECT_TRUE(o.bf16);
}

TEST(ReducerOptions, ZeroTimeoutLeavesTheGroupsAndThreeHundredIsReal) {
  ParallelConfig c;
  EXPECT_EQ(c.timeout_s, 0.0);  // the default: GRADMESH_COMM_TIMEOUT decides
  EXPECT_FALSE(collective_timeout(c).has_value());
  EXPECT_FALSE(reducer_options(c).timeout.has_value());
  c.timeout_s = 300;
  EXPECT_EQ(collective_timeout(c), comm::Millis(300'000));
  EXPECT_EQ(reducer_options(c).timeout, comm::Millis(300'000));
}

TEST(ReducerOptions, NumbersBeyondTheSchemaNeverReachACast) {
  ParallelConfig c;
  c.bucket_mb = 1e300;
  EXPECT_EQ(options_error(c), "parallel.bucket_mb: expected a number in (0, 65536], got 1e+300");
  c = ParallelConfig();
  c.first_bucket_mb = std::nan("");
  EXPECT_EQ(options_error(c), "parallel.first_bucket_mb: expected a finite number, got nan");
  c = ParallelConfig();
  c.timeout_s = 1e300;
  EXPECT_EQ(options_error(c), "parallel.timeout_s: expected a number in [0, 604800], got 1e+300");
  c.timeout_s = -1;
  EXPECT_EQ(options_error(c), "parallel.timeout_s: expected a number in [0, 604800], got -1");
}

}  // namespace
}  // namespace gradmesh::train

namespace gradmesh::train {
namespace {

std::string mesh_error(const ParallelConfig& c, int world) {
  try {
    training_mesh(c, world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "no error";
}

TEST(TrainingMesh, DataParallelFillsTheWorldAndAWrongProductIsNamed) {
  ParallelConfig c;
  EXPECT_EQ(training_mesh(c, 4), (parallel::MeshShape{4, 1, 1}));
  EXPECT_EQ(training_mesh(c, 1), (parallel::MeshShape{1, 1, 1}));
  c.mesh_dp = 3;
  EXPECT_NE(mesh_error(c, 4).find("dp x pp x tp = 3 must equal the world size 4"), std::string::npos);
  c.mesh_dp = 0;
  c.mesh_pp = 2;
  EXPECT_EQ(training_mesh(c, 4), (parallel::MeshShape{2, 2, 1}));  // what training cannot run yet is refused later
  c.mesh_pp = 1;
  c.mesh_tp = 2;
  EXPECT_NE(mesh_error(c, 1).find("pp x tp = 2 does not divide the world size 1"), std::string::npos);
}

}  // namespace
}  // namespace gradmesh::train
