// Which timeout an shm operation runs under: its own when the options name
// one (whatever its length, 300 s included), the group's when they do not.
#include <gtest/gtest.h>

#include <thread>

#include "comm/collective_reference.h"
#include "support/temp_dir.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

using TempDir = ::gradmesh::testing::TempDir;

// Long enough for two threads to attach; far shorter than the late rank's delay.
constexpr Millis kGroupTimeout{500};
constexpr auto kLateBy = std::chrono::milliseconds(2000);

TEST(ShmTimeout, AnExplicitTimeoutOfThreeHundredSecondsIsHonoured) {
  // 300 s used to double as "unset": it was replaced by the group's 0.5 s, so
  // the all-reduce failed while the late rank was still on its way.
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<float> result[2];
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = make_shm_process_group(store, rank, 2, kGroupTimeout);
    if (rank == 1) std::this_thread::sleep_for(kLateBy);
    Tensor t = Tensor::full({5}, static_cast<float>(rank + 1));
    AllreduceOptions options;
    options.timeout = Millis{300'000};
    group->allreduce(t, options)->wait();
    result[rank] = t.to_vector();
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int rank : {0, 1}) EXPECT_EQ(result[rank], std::vector<float>(5, 3.0f)) << "rank " << rank;
}

TEST(ShmTimeout, NoTimeoutInTheOptionsMeansTheGroups) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::string error;
  ErrorKind kind = ErrorKind::kInternal;
  std::atomic<bool> done{false};
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = make_shm_process_group(store, rank, 2, kGroupTimeout);
    if (rank == 1) {  // attached, but never joins the barrier
      while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    try {
      group->barrier()->wait();
    } catch (const Error& e) {
      kind = e.kind();
      error = e.what();
    }
    done = true;
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(kind, ErrorKind::kTimeout) << error;
  EXPECT_NE(error.find("timed out after 0.5 s; rank 1 did not arrive"), std::string::npos) << error;
}

}  // namespace
}  // namespace gradmesh::comm
