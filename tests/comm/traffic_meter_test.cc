// The traffic meter counts what really moved: shm's copies through the
// segment, gloo's bytes by the kernel's count (TCP_INFO), inter-host bytes
// only when the two ends of a connection have different addresses, and a
// destroyed group's bytes are kept. Ranks run as threads of this process, so
// the process-wide counters hold every rank's traffic.
#include <gtest/gtest.h>

#include "comm/collective_reference.h"
#include "comm/gloo_loopback.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/comm/traffic_meter.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using TempDir = gradmesh::testing::TempDir;

Traffic traffic_of(const std::string& backend) {
  const auto all = traffic_by_backend();
  const auto it = all.find(backend);
  return it == all.end() ? Traffic{} : it->second;
}

// Every rank all-reduces `count` floats `times` times.
void allreduce_on(const std::function<std::shared_ptr<ProcessGroup>(int)>& make, int world, int64_t count, int times) {
  const auto errors = testing::run_rank_threads(world, [&](int rank) {
    auto group = make(rank);
    for (int i = 0; i < times; ++i) {
      Tensor t = Tensor::full({count}, 1.0f);
      group->allreduce(t)->wait_or_throw();
      ASSERT_EQ(t.data()[0], static_cast<float>(world));
    }
  });
  EXPECT_EQ(testing::join_errors(errors), "");
}

// What `world` shm ranks moved through the segment all-reducing `count` floats `times` times.
Traffic shm_allreduce_traffic(int world, int64_t count, int times) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  const Traffic before = traffic_of("shm");
  allreduce_on([&](int rank) { return make_shm_process_group(store, rank, world, Millis(20'000)); }, world, count, times);
  const Traffic after = traffic_of("shm");
  Traffic delta;
  delta.sent = after.sent - before.sent, delta.received = after.received - before.received;
  delta.inter_host_sent = after.inter_host_sent - before.inter_host_sent;
  return delta;
}

TEST(TrafficMeter, ShmCountsEveryByteCopiedThroughTheSegment) {
  // Two ranks: each writes its half into the segment and the reduced half
  // back, and reads the other's half and the other reduced half: the whole
  // buffer each way, per rank and all-reduce.
  constexpr int64_t kCount = 1 << 20;
  const Traffic t = shm_allreduce_traffic(2, kCount, 3);
  const uint64_t expected = 2 * 3 * kCount * sizeof(float);
  EXPECT_EQ(t.sent, expected);
  EXPECT_EQ(t.received, expected);
  EXPECT_EQ(t.inter_host_sent, 0u) << "shm never leaves the host";
}

TEST(TrafficMeter, ShmCountsOnThreeRanksWhereSentAndReceivedDiffer) {
  // Rank r owns a slice s_r of each chunk: it writes the rest of its chunk
  // (n - s_r) and its reduced slice (s_r), and reads the others' copies of
  // its slice ((p - 1) s_r) and the others' reduced slices (n - s_r). Over
  // the ranks: p n written, p n + (p - 2) n read.
  constexpr int64_t kCount = 1 << 20;
  const Traffic t = shm_allreduce_traffic(3, kCount, 2);
  const uint64_t n = 2 * kCount * sizeof(float);
  EXPECT_EQ(t.sent, 3 * n);
  EXPECT_EQ(t.received, 4 * n);
}

TEST(TrafficMeter, GlooCountsTheKernelsBytesAndKeepsThemAfterTheGroupIsGone) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  const Traffic before = traffic_of("gloo");
  constexpr int64_t kCount = 1 << 20;  // 4 MiB: large enough that Gloo's framing is noise
  allreduce_on([&](int rank) { return make_gloo_process_group(store, rank, 2, testing::loopback()); }, 2, kCount, 2);
  // The groups are destroyed: their last readings were kept.
  const Traffic after = traffic_of("gloo");
  // A two-rank all-reduce sends half the buffer to reduce and half back:
  // the whole buffer per rank, plus headers (and the groups' set-up).
  const double payload = 2.0 * 2 * kCount * sizeof(float);
  const double sent = static_cast<double>(after.sent - before.sent);
  const double received = static_cast<double>(after.received - before.received);
  EXPECT_GE(sent, payload);
  EXPECT_LT(sent, payload * 1.05);
  EXPECT_GE(received, payload);
  EXPECT_LT(received, payload * 1.05);
  EXPECT_EQ(after.inter_host_sent, before.inter_host_sent) << "both ends are 127.0.0.1: the same host";
}

TEST(TrafficMeter, PushedCountsAreKeptByBackendAndInterHostOnlyWhenSaid) {
  const Traffic before = traffic_of("nccl");
  count_traffic(TrafficBackend::kNccl, 100, 40, /*inter_host=*/false);
  count_traffic(TrafficBackend::kNccl, 7, 3, /*inter_host=*/true);
  const Traffic after = traffic_of("nccl");
  EXPECT_EQ(after.sent - before.sent, 107u);
  EXPECT_EQ(after.received - before.received, 43u);
  EXPECT_EQ(after.inter_host_sent - before.inter_host_sent, 7u);
  EXPECT_EQ(after.inter_host_received - before.inter_host_received, 3u);
}

TEST(TrafficMeter, ASourceIsReadWhileItLivesAndFoldedInWhenItDies) {
  const Traffic before = traffic_of("mpi");
  uint64_t live = 10;
  {
    TrafficSource source(TrafficBackend::kMpi, [&] {
      Traffic t;
      t.sent = live, t.received = 2 * live;
      return t;
    });
    EXPECT_EQ(traffic_of("mpi").sent - before.sent, 10u);
    live = 25;
    EXPECT_EQ(traffic_of("mpi").received - before.received, 50u);
    live = 30;
  }
  const Traffic after = traffic_of("mpi");
  EXPECT_EQ(after.sent - before.sent, 30u) << "the last reading, taken as the source was destroyed";
  EXPECT_EQ(after.received - before.received, 60u);
}

}  // namespace
}  // namespace gradmesh::comm
