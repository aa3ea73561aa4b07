// ZeRO between real processes over gloo's TCP ring (forked ranks, loopback):
// its reduce-scatter and all-gather order the sums differently from the
// ring all-reduce of plain data parallelism, so the two agree to float32
// rounding rather than bit for bit.
#include <gtest/gtest.h>

#include <fstream>

#include "comm/collective_reference.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "parallel/trained_weights.h"
#include "parallel/zero_training.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

using testing::Optim;
using testing::TrainSpec;

// Relative to the largest weight. The ring's sums round in another order
// than the all-reduce's; after four steps the weights differ by about one
// float32 rounding (8e-8 measured), so 1e-6 still catches any real error
// (a wrong or missing piece moves weights by lr-sized amounts).
constexpr double kRingSums = 1e-6;

void write_floats(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<float> values(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  return values;
}

TEST(ZeroProcesses, GlooRanksMatchPlainDataParallel) {
  constexpr int kWorld = 3;
  gradmesh::testing::TempDir dir;
  const std::string root = dir.path();
  const auto outcomes = comm::testing::run_rank_processes(kWorld, [&](int rank) {
    comm::ProcessGroupOptions options;
    options.backend = "gloo";
    options.hostname = "127.0.0.1";
    options.timeout = comm::Millis(20'000);
    auto group = comm::make_gloo_process_group(std::make_shared<comm::FileStore>(root + "/store"), rank, kWorld,
                                               options);
    for (int stage : {0, 1, 2}) {  // the same collectives in the same order on every rank
      TrainSpec spec;
      spec.stage = stage;
      spec.clip = 0.5f;
      write_floats(root + "/stage" + std::to_string(stage) + "-rank" + std::to_string(rank),
                   testing::train_rank(spec, group).params);
    }
  }, std::chrono::seconds(60));
  for (int r = 0; r < kWorld; ++r) ASSERT_EQ(outcomes[r].exit_code, 0) << "rank " << r << ": " << outcomes[r].message;
  const auto result = [&](int stage, int rank) {
    return read_floats(root + "/stage" + std::to_string(stage) + "-rank" + std::to_string(rank));
  };
  const std::vector<float> plain = result(0, 0);
  ASSERT_FALSE(plain.empty());
  for (int stage : {1, 2})
    for (int r = 0; r < kWorld; ++r) {
      const std::vector<float> zero = result(stage, r);
      EXPECT_EQ(zero, result(stage, 0)) << "rank " << r;
      EXPECT_LE(gradmesh::testing::relative_difference(zero, plain), kRingSums) << "stage " << stage << " rank " << r;
    }
}

}  // namespace
}  // namespace gradmesh::parallel
