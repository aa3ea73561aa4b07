// The gloo backend when things go wrong: a rank that never arrives (at the
// rendezvous, at a collective, at a receive), a per-operation timeout shorter
// than Gloo's own, a group destroyed with an operation in flight, and a peer
// process killed in the middle of a collective. Every case must fail within
// its timeout, name the missing rank, and leave the group broken, never hang.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <regex>
#include <string>
#include <thread>

#include "comm/collective_reference.h"
#include "comm/gloo_loopback.h"
#include "gradmesh/comm/file_store.h"
#include "gradmesh/comm/gloo/process_group.h"
#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::comm {
namespace {

using TempDir = gradmesh::testing::TempDir;
using testing::loopback;
// EXPECT_TRUE(contains(...)) with the whole text in the failure message.
::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << part << "' not found in: " << text;
}

// Waits for `work` (bounded, so a hang fails the test) and returns its error.
Error failure_of(const std::shared_ptr<Work>& work, Millis bound = Millis(20'000)) {
  try {
    if (!work->wait(bound)) return Error(ErrorKind::kInternal, "still running after the test's bound (a hang)");
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::kInternal, "succeeded");
}

TEST(GlooFailure, RendezvousNamesTheRankThatNeverArrived) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::string> messages(2);
  std::vector<ErrorKind> kinds(2, ErrorKind::kInternal);
  testing::run_rank_threads(2, [&](int rank) {  // ranks 0 and 1 of 3; rank 2 never starts
    try {
      make_gloo_process_group(store, rank, 3, loopback(Millis(600)));
    } catch (const Error& e) {
      messages[rank] = e.what();
      kinds[rank] = e.kind();
    }
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(kinds[rank], ErrorKind::kTimeout) << messages[rank];
    EXPECT_TRUE(contains(messages[rank], "rank 2 did not arrive")) << messages[rank];
  }
}

// Another program's value under a key the group reads: a store that returns
// "lots" for every key containing `garbled` (such as the peers' synchronous
// limits, "sync_max_bytes/<rank>").
class GarbledStore final : public Store {
 public:
  GarbledStore(std::shared_ptr<Store> inner, std::string garbled)
      : inner_(std::move(inner)), garbled_(std::move(garbled)) {}
  void set(const std::string& key, const std::string& value) override { inner_->set(key, value); }
  std::string get(const std::string& key, Millis timeout) override {
    const std::string value = inner_->get(key, timeout);
    return key.find(garbled_) != std::string::npos ? "lots" : value;
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    return inner_->compare_set(key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, Millis timeout) override { inner_->wait(keys, timeout); }
  bool check(const std::vector<std::string>& keys) override { return inner_->check(keys); }
  bool remove(const std::string& key) override { return inner_->remove(key); }
  std::string describe() const override { return inner_->describe(); }

 private:
  std::shared_ptr<Store> inner_;
  std::string garbled_;
};

// Rank 0 reads "lots" for the keys containing `garbled`; returns both ranks' errors.
std::vector<std::string> messages_with_garbled(const std::string& garbled) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::vector<std::string> messages(2);
  testing::run_rank_threads(2, [&](int rank) {
    try {
      // Rank 0 reads garbage; rank 1 then waits for it in vain and times out.
      std::shared_ptr<Store> own = store;
      if (rank == 0) own = std::make_shared<GarbledStore>(store, garbled);
      make_gloo_process_group(own, rank, 2, loopback(Millis(1'000)));
    } catch (const Error& e) {
      messages[rank] = e.what();
    }
  });
  return messages;
}

TEST(GlooFailure, MalformedLimitInTheStoreNamesTheKey) {
  const auto messages = messages_with_garbled("sync_max_bytes/");
  EXPECT_TRUE(contains(messages[0], "key 'sync_max_bytes/0' holds 'lots', expected a byte count")) << messages[0];
  EXPECT_FALSE(messages[1].empty()) << "rank 1 must fail, not hang";
}

TEST(GlooFailure, MalformedHostAgreementInTheStoreNamesTheKey) {
  const auto messages = messages_with_garbled("peers_on_this_host/");
  EXPECT_TRUE(contains(messages[0], "key 'peers_on_this_host/0' holds 'lots', expected 0 or 1")) << messages[0];
  EXPECT_FALSE(messages[1].empty()) << "rank 1 must fail, not hang";
}

TEST(GlooFailure, CollectiveNamesTheRankThatNeverArrived) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  constexpr int kWorld = 3;
  std::vector<std::string> messages(kWorld);
  std::vector<ErrorKind> kinds(kWorld, ErrorKind::kInternal);
  // One element per rank thread: not vector<bool>, whose elements share a word.
  std::vector<char> broken(kWorld, false), later_failed(kWorld, false);
  std::promise<void> others_done;
  std::shared_future<void> others_done_future = others_done.get_future().share();
  std::atomic<int> finished{0};
  const auto errors = testing::run_rank_threads(kWorld, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, kWorld, loopback(Millis(1'000)));
    Tensor t = Tensor::full({100'003}, 1.0f);
    group->allreduce(t)->wait();  // everyone arrives at #1
    if (rank == 2) {
      // Alive but never calls #2; stays until the others have failed.
      others_done_future.wait_for(std::chrono::seconds(20));
      return;
    }
    Error error = failure_of(group->allreduce(t));
    messages[rank] = error.what();
    kinds[rank] = error.kind();
    broken[rank] = group->broken();
    later_failed[rank] = failure_of(group->barrier(), Millis(1'000)).kind() == ErrorKind::kComm;
    if (++finished == 2) others_done.set_value();
  });
  EXPECT_TRUE(errors[0].empty() && errors[1].empty() && errors[2].empty());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(kinds[rank], ErrorKind::kTimeout) << messages[rank];
    EXPECT_TRUE(contains(messages[rank], "gloo allreduce #2 (f32 x 100003, sum)"));
    EXPECT_TRUE(contains(messages[rank], "timed out after 1.0 s"));
    EXPECT_TRUE(contains(messages[rank], "rank 2 did not arrive (ranks 0, 1 did)"));
    EXPECT_TRUE(broken[rank]);
    EXPECT_TRUE(later_failed[rank]) << "a broken group must fail later calls at once";
  }
}

TEST(GlooFailure, PerOperationTimeoutShorterThanTheGroupsIsHonoured) {
  // Gloo's tuned all-reduces time out per pair at the group's 60 s; the
  // operation's 300 ms must still win (the watchdog shuts the sockets down).
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::string message;
  std::promise<void> done;
  std::shared_future<void> done_future = done.get_future().share();
  testing::run_rank_threads(2, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, 2, loopback(Millis(60'000)));
    if (rank == 1) {
      done_future.wait_for(std::chrono::seconds(20));
      return;
    }
    Tensor t = Tensor::full({1'000}, 1.0f);
    AllreduceOptions options;
    options.timeout = Millis(300);
    message = failure_of(group->allreduce(t, options), Millis(10'000)).what();
    done.set_value();
  });
  EXPECT_TRUE(contains(message, "gloo allreduce #1 (f32 x 1000, sum): timed out after 300 ms"));
  EXPECT_TRUE(contains(message, "rank 1 did not arrive"));
}

TEST(GlooFailure, ReceiveFromASilentPeerTimesOutNamingIt) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::string message;
  bool broken = false;
  std::promise<void> done;
  std::shared_future<void> done_future = done.get_future().share();
  testing::run_rank_threads(2, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, 2, loopback(Millis(60'000)));
    if (rank == 1) {
      done_future.wait_for(std::chrono::seconds(20));
      return;
    }
    Tensor t = Tensor::zeros({10});
    CollectiveOptions options;
    options.timeout = Millis(300);
    message = failure_of(group->recv(t, 1, 4, options), Millis(10'000)).what();
    broken = group->broken();
    done.set_value();
  });
  EXPECT_TRUE(
      contains(message, "gloo recv #1 (f32 x 10 from rank 1, tag 4): timed out after 300 ms waiting for rank 1"));
  EXPECT_TRUE(broken);
}

TEST(GlooFailure, DestroyingAGroupWithAnOperationInFlightDoesNotHang) {
  TempDir dir;
  auto store = std::make_shared<FileStore>(dir.path());
  std::string message;
  std::promise<void> done;
  std::shared_future<void> done_future = done.get_future().share();
  testing::run_rank_threads(2, [&](int rank) {
    auto group = make_gloo_process_group(store, rank, 2, loopback(Millis(60'000)));
    if (rank == 1) {
      done_future.wait_for(std::chrono::seconds(20));
      return;
    }
    Tensor t = Tensor::full({1'000'003}, 1.0f);
    AllreduceOptions queued;  // runs on the communication thread, not this one
    queued.background = true;
    auto work = group->allreduce(t, queued);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    group.reset();  // must return long before the 60 s timeout
    message = failure_of(work, Millis(5'000)).what();
    done.set_value();
  });
  EXPECT_TRUE(contains(message, "gloo allreduce #1 (f32 x 1000003, sum): cancelled: the group was destroyed"));
}

// `count` floats per all-reduce: over 256 KiB they run on the event-loop
// connections, up to it on the synchronous ones (algorithm_choice.h); BF16
// over 64 Ki elements runs our own ring (bf16_ring.h).
void expect_peer_death_named(int64_t count, DType dtype = DType::kF32) {
  TempDir dir;
  constexpr int kWorld = 3;
  const std::string store_dir = dir.path();
  const auto outcomes = testing::run_rank_processes(kWorld, [&](int rank) {
    auto group =
        make_gloo_process_group(std::make_shared<FileStore>(store_dir), rank, kWorld, loopback(Millis(10'000)));
    // Gloo writes with writev(): without this, a write to the dead peer's socket kills the survivor with SIGPIPE.
    struct sigaction pipe_action {};
    if (::sigaction(SIGPIPE, nullptr, &pipe_action) != 0 || pipe_action.sa_handler != SIG_IGN)
      throw std::runtime_error("SIGPIPE is not ignored after creating a gloo group");
    Tensor t = Tensor::full({count}, 1.0f).to(dtype);
    group->allreduce(t)->wait();
    if (rank == 2) {
      // Dies while its main thread is inside an all-reduce.
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        ::raise(SIGKILL);
      }).detach();
    }
    for (int i = 0; i < 100'000; ++i) group->allreduce(t)->wait();
    throw std::runtime_error("no error after the peer died");
  });
  EXPECT_EQ(outcomes[2].signal, SIGKILL);
  for (int rank = 0; rank < 2; ++rank) {
    // A survivor killed by a signal (SIGPIPE from writing to the dead peer's socket) would show here.
    EXPECT_EQ(outcomes[rank].exit_code, 1) << outcomes[rank].message << " (signal " << outcomes[rank].signal << ")";
    EXPECT_TRUE(contains(outcomes[rank].message, "gloo allreduce #"));
    // The dead rank is named. The other survivor may be named with it: it
    // can fail and exit before this one takes stock of who arrived.
    EXPECT_TRUE(std::regex_search(outcomes[rank].message, std::regex(R"(ranks? (\d+, )*2 did not arrive)")))
        << outcomes[rank].message;
    EXPECT_FALSE(std::regex_search(outcomes[rank].message, std::regex("ranks? (\\d+, )*" + std::to_string(rank) +
                                                                       "[, ].*did not arrive")))
        << "a survivor does not blame itself: " << outcomes[rank].message;
  }
}

TEST(GlooFailure, PeerKilledMidCollective) { expect_peer_death_named(1'000'003); }

TEST(GlooFailure, PeerKilledMidSynchronousCollective) { expect_peer_death_named(1'000); }

TEST(GlooFailure, PeerKilledMidBf16Ring) { expect_peer_death_named(1'000'003, DType::kBF16); }

}  // namespace
}  // namespace gradmesh::comm
