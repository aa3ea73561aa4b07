// How the shm backend fails: a rank that never arrives, a rank that dies, a
// group used after it broke, mismatched send/recv, a group destroyed while a
// peer waits; and that no failure leaves a segment in /dev/shm.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <thread>

#include "comm/collective_reference.h"
#include "comm/shm_segments.h"
#include "support/temp_dir.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/shm/process_group.h"
#include "gradmesh/comm/shm/segment.h"
#include "gradmesh/core/error.h"

namespace gradmesh::comm {
namespace {

using TempDir = ::gradmesh::testing::TempDir;

using testing::leftover_segments;

// The error a Work failed with: kind and message.
std::pair<ErrorKind, std::string> kind_and_message_of(const std::shared_ptr<Work>& work) {
  try {
    work->wait();
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  return {ErrorKind::kInternal, "(no error)"};
}

bool text_contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ShmFailure, ARankThatNeverArrivesIsNamed) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  constexpr int kWorld = 3;
  std::vector<std::pair<ErrorKind, std::string>> seen(kWorld);
  bool broken_after[kWorld] = {}, later_failed_at_once[kWorld] = {};  // not vector<bool>: ranks write concurrently
  std::atomic<int> finished{0};
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = make_shm_process_group(store, rank, kWorld, Millis(20'000));
    if (rank == 2) {
      // Attached and alive, but busy elsewhere: never calls the collective.
      while (finished < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return;
    }
    Tensor t = Tensor::full({7}, 1.0f);
    AllreduceOptions options;
    options.timeout = Millis(500);
    seen[rank] = kind_and_message_of(group->allreduce(t, options));
    broken_after[rank] = group->broken();
    auto later = group->barrier();
    later_failed_at_once[rank] = later->completed() && later->error() != nullptr;
    ++finished;
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int rank : {0, 1}) {
    EXPECT_EQ(seen[rank].first, ErrorKind::kTimeout) << seen[rank].second;
    // Whichever rank timed out first stops the group; the other reports it, still naming rank 2.
    EXPECT_TRUE(text_contains(seen[rank].second, "shm allreduce #1 (f32 x 7, sum): ")) << seen[rank].second;
    EXPECT_TRUE(text_contains(seen[rank].second, "timed out after 0.5 s; rank 2 did not arrive")) << seen[rank].second;
    EXPECT_TRUE(broken_after[rank]);
    EXPECT_TRUE(later_failed_at_once[rank]);
  }
}

TEST(ShmFailure, ARankThatNeverJoinsIsNamedAndTheSegmentIsRemoved) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  try {
    make_shm_process_group(store, 0, 2, Millis(300));
    FAIL() << "creating a group without rank 1 succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_TRUE(text_contains(e.what(), "waiting for rank 1 to attach")) << e.what();
  }
  EXPECT_TRUE(leftover_segments(*store).empty());
  // And from the other side: rank 0 never publishes a segment.
  TempDir other;
  try {
    make_shm_process_group(std::make_shared<FileStore>(other.path()), 1, 2, Millis(300));
    FAIL() << "joining a group without rank 0 succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
    EXPECT_TRUE(text_contains(e.what(), "rank 0 did not publish")) << e.what();
  }
}

TEST(ShmFailure, AKilledRankIsNamedWithoutWaitingForTheTimeout) {
  TempDir dir;
  const std::string store_dir = dir.path();
  constexpr int kWorld = 3;
  const auto outcomes = testing::run_rank_processes(kWorld, [&](int rank) {
    auto store = std::make_shared<FileStore>(store_dir);
    auto group = make_shm_process_group(store, rank, kWorld, Millis(20'000));
    group->barrier()->wait();
    if (rank == 1) ::raise(SIGKILL);
    Tensor t = Tensor::full({1'000'003}, 1.0f);
    AllreduceOptions options;
    options.timeout = Millis(60'000);  // far longer than the test: only death detection can end the wait
    auto [kind, message] = kind_and_message_of(group->allreduce(t, options));
    if (kind != ErrorKind::kComm || !text_contains(message, "shm allreduce #2 (f32 x 1000003, sum)") ||
        !text_contains(message, "rank 1 (pid ") || !text_contains(message, "died"))
      throw std::runtime_error("unexpected failure: " + message);
  }, std::chrono::seconds(30));
  EXPECT_EQ(outcomes[1].signal, SIGKILL);
  for (int rank : {0, 2}) EXPECT_EQ(outcomes[rank].exit_code, 0) << "rank " << rank << ": " << outcomes[rank].message;
  EXPECT_TRUE(leftover_segments(FileStore(store_dir)).empty());
}

TEST(ShmFailure, MismatchedSendAndRecvAreNamed) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::pair<ErrorKind, std::string> at_receiver, at_sender_later;
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = make_shm_process_group(store, rank, 2, Millis(5'000));
    if (rank == 0) {
      group->send(Tensor::full({10}, 1.0f), 1, 3)->wait();  // fits the mailbox: completes
      at_sender_later = kind_and_message_of(group->barrier());
    } else {
      Tensor in = Tensor::zeros({5});
      at_receiver = kind_and_message_of(group->recv(in, 0, 3));
    }
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(at_receiver.first, ErrorKind::kComm);
  EXPECT_TRUE(text_contains(at_receiver.second, "shm recv #1 (f32 x 5 from rank 0, tag 3): rank 0 sent f32 x 10 with tag 3"))
      << at_receiver.second;
  // The receiver stopped the group, so the sender's next call fails at once, naming why.
  EXPECT_EQ(at_sender_later.first, ErrorKind::kComm);
  EXPECT_TRUE(text_contains(at_sender_later.second, "rank 1 stopped the group: rank 0 sent f32 x 10")) << at_sender_later.second;
}

TEST(ShmFailure, DestroyingAGroupCancelsItsWaitingOperation) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::pair<ErrorKind, std::string> cancelled, peer;
  std::atomic<bool> destroyed{false};
  constexpr int64_t kQueued = ShmProcessGroup::kInlineBytes / sizeof(float) + 1000;
  const auto errors = testing::run_rank_threads(2, [&](int rank) {
    auto group = make_shm_process_group(store, rank, 2, Millis(60'000));
    if (rank == 0) {
      // Over kInlineBytes: queued on the communication thread, so the call returns at once.
      Tensor t = Tensor::full({kQueued}, 1.0f);
      auto work = group->allreduce(t);
      group.reset();  // must not wait out the 60 s timeout
      destroyed = true;
      cancelled = kind_and_message_of(work);
    } else {
      while (!destroyed) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      Tensor t = Tensor::full({kQueued}, 1.0f);
      peer = kind_and_message_of(group->allreduce(t));
    }
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_TRUE(text_contains(cancelled.second, "cancelled")) << cancelled.second;
  EXPECT_EQ(peer.first, ErrorKind::kComm);
  EXPECT_TRUE(text_contains(peer.second, "rank 0 stopped the group")) << peer.second;
}

}  // namespace
}  // namespace gradmesh::comm
