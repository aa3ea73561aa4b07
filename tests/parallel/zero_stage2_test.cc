// ZeRO stage 2's memory: after finish_step the pages of the gradient buffer
// that hold other ranks' pieces are back with the OS (mincore reports them
// not resident) and read as zeros, while this rank's pieces hold the sums.
// Stage 1 keeps the whole buffer. Ranks are threads over a real shm group.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>

#include "comm/collective_reference.h"
#include "gradmesh/autograd/ops.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/nn/models.h"
#include "gradmesh/parallel/zero_reducer.h"
#include "support/temp_dir.h"

namespace gradmesh::parallel {
namespace {

struct GradientRun {
  std::vector<std::vector<float>> local;   // per rank: its own gradient, before any reduction
  std::vector<std::vector<float>> after;   // per rank: the gradient buffer after finish_step
  std::vector<std::vector<FlatRange>> owned;
  std::vector<int64_t> others_pages;       // per rank: whole pages inside other ranks' pieces
  std::vector<int64_t> resident_pages;     // ... of which mincore reports resident
};

// Whole pages inside [begin, end) of `grads`, and how many are resident.
std::pair<int64_t, int64_t> whole_pages(float* grads, int64_t begin, int64_t end) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (reinterpret_cast<uintptr_t>(grads + begin) + page - 1) / page * page;
  const uintptr_t last = reinterpret_cast<uintptr_t>(grads + end) / page * page;
  if (first >= last) return {0, 0};
  std::vector<unsigned char> resident((last - first) / page);
  if (::mincore(reinterpret_cast<void*>(first), last - first, resident.data()) != 0) return {-1, -1};
  int64_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return {static_cast<int64_t>(resident.size()), count};
}

GradientRun run_two_steps(int world, int stage) {
  gradmesh::testing::TempDir dir;
  auto store = std::make_shared<comm::FileStore>(dir.path());
  GradientRun run;
  run.local.resize(world);
  run.after.resize(world);
  run.owned.resize(world);
  run.others_pages.assign(world, 0);
  run.resident_pages.assign(world, 0);
  const auto errors = comm::testing::run_rank_threads(world, [&](int rank) {
    auto group = comm::make_shm_process_group(store, rank, world, comm::Millis(20'000));
    nn::MlpSpec spec;
    spec.in_features = 64;
    spec.hidden = {256, 256};
    spec.classes = 10;  // 85,002 parameters: 332 KiB of gradients, ~83 pages
    nn::Model model(nn::build_mlp(spec), 5);
    ZeroOptions options;
    options.stage = stage;
    options.first_bucket_bytes = 16 << 10;
    options.bucket_bytes = 64 << 10;
    ZeroReducer reducer(model, group, options);
    run.owned[rank] = reducer.owned_ranges();
    // Twice: the second backward writes into pages the first step gave back.
    for (int step = 0; step < 2; ++step) {
      auto backprop = [&](const autograd::GradReadyHook& hook) {
        model.zero_grad();
        std::vector<float> x(3 * 64);
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.1f + rank + step);
        auto loss = autograd::cross_entropy(model.forward(autograd::Variable(Tensor::from_vector({3, 64}, x))),
                                            {rank % 10, 3, step}, 3.0f * world);
        if (hook) reducer.set_step_loss(loss.value().item());
        model.backward(loss, hook);
      };
      backprop({});  // this rank's own gradient, in a pass the reducer does not see
      run.local[rank] = model.flat_grads().to_vector();
      backprop(reducer.begin_step());
      reducer.finish_step();
      ASSERT_TRUE(reducer.step_finite());
    }
    // Residency first: reading a page given back maps it again.
    float* grads = model.flat_grads().data();
    for (size_t b = 0; b < reducer.layout().buckets().size(); ++b) {
      const FlatRange range = reducer.layout().buckets()[b].range, mine = reducer.layout().owned(b, rank);
      for (const auto& [begin, end] : {std::pair{range.begin, mine.begin}, std::pair{mine.end, range.end}}) {
        const auto [pages, resident] = whole_pages(grads, begin, end);
        run.others_pages[rank] += pages;
        run.resident_pages[rank] += resident;
      }
    }
    run.after[rank] = model.flat_grads().to_vector();
  });
  EXPECT_EQ(comm::testing::join_errors(errors), "");
  return run;
}

bool owned_by(const std::vector<FlatRange>& ranges, int64_t i) {
  for (const FlatRange& r : ranges)
    if (r.begin <= i && i < r.end) return true;
  return false;
}

// Owned elements hold the sum over ranks; the others hold `other(rank, i)`.
template <typename Other>
void expect_gradients(const GradientRun& run, Other other) {
  const int world = static_cast<int>(run.local.size());
  const auto n = static_cast<int64_t>(run.local[0].size());
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(static_cast<int64_t>(run.after[rank].size()), n);
    for (int64_t i = 0; i < n; ++i) {
      const float got = run.after[rank][static_cast<size_t>(i)];
      if (owned_by(run.owned[rank], i)) {
        double sum = 0;
        for (const auto& local : run.local) sum += local[static_cast<size_t>(i)];
        ASSERT_NEAR(got, sum, 1e-6) << "rank " << rank << " element " << i;
      } else {
        ASSERT_EQ(got, other(rank, i)) << "rank " << rank << " element " << i;
      }
    }
  }
}

TEST(ZeroStage2, OtherRanksGradientPagesGoBackToTheOsAndReadZero) {
  for (int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    const GradientRun run = run_two_steps(world, 2);
    for (int rank = 0; rank < world; ++rank) {
      EXPECT_GT(run.others_pages[rank], 10) << "rank " << rank << ": the check needs whole pages to look at";
      EXPECT_EQ(run.resident_pages[rank], 0) << "rank " << rank;
    }
    expect_gradients(run, [](int, int64_t) { return 0.0f; });
  }
}

TEST(ZeroStage1, KeepsTheWholeGradientBuffer) {
  const GradientRun run = run_two_steps(2, 1);
  // Not reduced, not released: the other ranks' pieces still hold this rank's own gradient.
  expect_gradients(run, [&](int rank, int64_t i) { return run.local[rank][static_cast<size_t>(i)]; });
  int64_t nonzero = 0;
  for (float g : run.after[0]) nonzero += g != 0.0f;
  EXPECT_GT(nonzero, 1000);
}

}  // namespace
}  // namespace gradmesh::parallel
