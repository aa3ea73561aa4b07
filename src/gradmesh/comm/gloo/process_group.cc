#include "gradmesh/comm/gloo/process_group.h"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>

#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>

#include "gradmesh/comm/arrival_report.h"
#include "gradmesh/comm/endpoint.h"
#include "gradmesh/comm/gloo/algorithm_choice.h"
#include "gradmesh/comm/gloo/allreduce_cache.h"
#include "gradmesh/comm/gloo/bf16_ring.h"
#include "gradmesh/comm/gloo/device.h"
#include "gradmesh/comm/gloo/failure_census.h"
#include "gradmesh/comm/gloo/messages.h"
#include "gradmesh/comm/gloo/op_watchdog.h"
#include "gradmesh/comm/gloo/pair_mesh.h"
#include "gradmesh/comm/gloo/peer_sets.h"
#include "gradmesh/comm/gloo/point_to_point.h"
#include "gradmesh/comm/gloo/rendezvous_failure.h"
#include "gradmesh/comm/gloo/ring_reduce_scatter.h"
#include "gradmesh/comm/gloo/transport_access.h"
#include "gradmesh/comm/op_queue.h"
#include "gradmesh/comm/reduce.h"
#include "gradmesh/core/bf16.h"
#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"

namespace gradmesh::comm {
namespace gloo_backend {
namespace {

using Clock = std::chrono::steady_clock;
// Gloo's own timeouts fire this much after ours, so the watchdog, which knows
// which operation expired, normally reports first.
constexpr Millis kGlooBackstop{1000};
// A collective issued while none is queued or running runs on the caller's
// thread, whatever its size: the caller is about to wait for it (code that
// computes meanwhile sets CollectiveOptions::background). The hand-off to the
// communication thread and back costs ~50 us on 2 busy cores (measured with
// bench/gloo_crossover.sh), half of a 4 KB all-reduce over loopback, and more
// than that for large messages: a 4 MB all-reduce on 2 ranks took a median
// 4.19 ms queued against 3.87 ms inline (8 alternating runs each).
// How long a healthy group waits at destruction for its peers (say_goodbye()).
constexpr Millis kGoodbyeWait{5000};

// options.lazy_connections, else GRADMESH_GLOO_LAZY; "auto" connects lazily
// where a full mesh stops fitting one host's ports (algorithm_choice.h).
bool uses_lazy_connections(const ProcessGroupOptions& options, int size) {
  if (options.lazy_connections) return *options.lazy_connections;
  const std::string mode = env_string("GRADMESH_GLOO_LAZY");
  if (mode == "auto" || mode.empty()) return size > kSyncMeshMaxRanks;
  return env_flag("GRADMESH_GLOO_LAZY", false);
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options,
                   std::shared_ptr<gloo::transport::Device> device, std::vector<int> global_ranks);
  ~GlooProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }
  bool broken() const override { return queue_.broken(); }

  std::shared_ptr<Work> allreduce(Tensor& tensor, const AllreduceOptions& options) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, const BroadcastOptions& options) override;
  std::shared_ptr<Work> allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options) override;
  std::shared_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, const AllreduceOptions& options) override;
  std::shared_ptr<Work> barrier(const CollectiveOptions& options) override;
  std::shared_ptr<Work> send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options) override;
  std::shared_ptr<Work> recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options) override;
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;
  std::string allreduce_algorithm(size_t bytes) const override;

 private:
  struct Op {
    std::string description;  // "allreduce #3 (f32 x 1000003, sum)"
    int64_t seq;
    Millis timeout;
    Millis gloo_timeout() const { return timeout + kGlooBackstop; }
  };

  // An operation's timeout left empty means the group's (options_.timeout,
  // always set: make_gloo_process_group resolves it).
  Millis effective(std::optional<Millis> timeout) const { return timeout.value_or(*options_.timeout); }
  std::string rank_text(int rank) const;
  void check_tensor(const Tensor& tensor, const char* op) const;
  std::shared_ptr<Work> submit(const std::string& name, const std::string& details,
                               const CollectiveOptions& options, std::function<void(const Op&)> body);
  void run_collective(const Op& op, const std::function<void(const Op&)>& body);
  [[noreturn]] void fail(const Op& op, std::exception_ptr error, bool expired);
  void say_goodbye();
  // `meshes`: how many full meshes this group holds once this one is up (for the failure's hint).
  std::shared_ptr<gloo::rendezvous::Context> connect_mesh(const std::shared_ptr<Store>& store, int meshes);
  // Agrees with every rank on how all-reduces use the synchronous mesh:
  // sync_max_bytes_, the smallest of the hosts' limits, and
  // peers_on_this_host_, true if every rank sees only loopback connections.
  void agree_on_synchronous_use();
  // Shuts down every connection of both meshes: pending waits fail here and on the peers.
  void shut_down_meshes();
  void run_allreduce(void* data, int64_t count, DType dtype, ReduceOp reduce, Millis wait_timeout);
  // With lazy connections, connects the pairs to `peers` that are not yet
  // (pair_mesh.h) and adds them to sockets_; nothing otherwise.
  void connect_peers(const std::vector<int>& peers);
  // The peers a collective's algorithm addresses (peer_sets.h); `root` for broadcasts.
  enum class PeerSet { kRingPeers, kHalvingDoublingPeers, kBarrierPeers, kBroadcastPeers };
  // Before a collective, with lazy connections: connects `set`'s peers the
  // first time it runs. Later calls, and every call without lazy
  // connections, cost one test: no peer list is computed on the hot path.
  // Collectives run one at a time, so the flags need no lock.
  void connect_for(PeerSet set, int root = 0);

  std::shared_ptr<Store> store_;  // keys under "gloo/<n>/" (sub-groups: "gloo/<n>/sub<k>/")
  const int rank_, size_;
  const ProcessGroupOptions options_;
  const std::vector<int> global_ranks_;  // rank in this group -> rank in the top-level group
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;       // null when size_ == 1
  std::shared_ptr<gloo::rendezvous::Context> sync_context_;  // the same peers in synchronous mode; null when size_ == 1
  PairMeshContext* lazy_mesh_ = nullptr;  // context_ when it connects lazily: no synchronous mesh then
  std::array<bool, 3> set_connected_{};   // by PeerSet, but broadcasts
  std::vector<bool> root_connected_;      // broadcasts, by root
  // Their connections, for shutting down and probing from any thread; set once in the constructor.
  std::unique_ptr<PairSockets> sockets_, sync_sockets_;
  std::unique_ptr<AllreduceCache> cache_, sync_cache_;
  size_t sync_max_bytes_ = 0;  // all-reduces up to this size run on sync_context_
  bool peers_on_this_host_ = false;  // every rank agreed all its connections run over loopback
  // Used by one collective at a time (queued, or inline while none is queued):
  RingScratch ring_scratch_;    // partials of the reduce-scatter and BF16 all-reduce rings
  std::vector<float> staging_;  // a small BF16 all-reduce on one host, widened

  std::mutex submit_mutex_;  // numbers collectives and runs inline ones: one submission at a time
  int64_t seq_ = 0;
  std::atomic<int> pending_{0};  // collectives queued or running on the communication thread
  std::mutex state_mutex_;
  bool in_flight_ = false, closing_ = false;
  int subgroups_ = 0;
  PointToPoint point_to_point_;

  std::unique_ptr<OpWatchdog> watchdog_;
  OpQueue queue_;  // last: its thread stops before anything it uses is destroyed
};

GlooProcessGroup::GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, const ProcessGroupOptions& options,
                                   std::shared_ptr<gloo::transport::Device> device, std::vector<int> global_ranks)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      options_(options),
      global_ranks_(std::move(global_ranks)),
      device_(std::move(device)),
      point_to_point_(rank, size,
                      {[this](int r) { return rank_text(r); }, [this] { return queue_.broken(); },
                       [this](const std::string& message) {
                         shut_down_meshes();
                         queue_.mark_broken(message);
                       },
                       [this](int peer) { connect_peers({peer}); }}),
      queue_("gloo group (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")") {
  watchdog_ = std::make_unique<OpWatchdog>([this] { shut_down_meshes(); });
  if (size_ == 1) return;
  if (!device_) device_ = create_device(choose_listen_address(options_));
  if (uses_lazy_connections(options_, size_)) {
    // One mesh, connected operation by operation: the synchronous mesh would
    // connect every pair up front again.
    auto context = std::make_shared<PairMeshContext>(rank_, size_);
    context->setTimeout(*options_.timeout + kGlooBackstop);
    context->start_lazy(store_, device_, *options_.timeout);
    lazy_mesh_ = context.get();
    root_connected_.assign(static_cast<size_t>(size_), false);
    context_ = std::move(context);
    sockets_ = std::make_unique<PairSockets>();
    cache_ = std::make_unique<AllreduceCache>(context_);
    return;
  }
  context_ = connect_mesh(store_, 1);
  sockets_ = std::make_unique<PairSockets>(*context_);
  cache_ = std::make_unique<AllreduceCache>(context_);
  // The second mesh, for small all-reduces (runs_synchronously()) and, when
  // every rank is on this host, large ones in pieces (allreduce_piece_bytes()).
  // Only the cached all-reduce objects use it: Gloo's unbound-buffer
  // operations (broadcast, all-gather, barrier, send/recv) need the event loop.
  // A large group keeps one mesh: the second doubles every rank's
  // connections, and many ranks on one host run out of local ports first.
  if (size_ > kSyncMeshMaxRanks) return;
  agree_on_synchronous_use();
  if (sync_max_bytes_ == 0) return;
  auto sync_context = connect_mesh(std::make_shared<PrefixStore>(store_, "sync"), 2);
  try {
    for (int peer = 0; peer < size_; ++peer)
      if (peer != rank_) sync_context->getPair(peer)->setSync(/*sync=*/true, /*busyPoll=*/false);
  } catch (const std::exception& e) {
    throw_error(ErrorKind::kComm, "gloo rendezvous in " + store_->describe() + " (rank " + std::to_string(rank_) + ")",
                "a connection closed while it was set up: " + without_source_location(e.what()));
  }
  sync_sockets_ = std::make_unique<PairSockets>(*sync_context);
  sync_context_ = std::move(sync_context);
  sync_cache_ = std::make_unique<AllreduceCache>(sync_context_);
}

std::shared_ptr<gloo::rendezvous::Context> GlooProcessGroup::connect_mesh(const std::shared_ptr<Store>& store,
                                                                         int meshes) {
  auto context = std::make_shared<PairMeshContext>(rank_, size_);
  // Gloo's pairs keep this timeout for every later wait (the watchdog enforces
  // each operation's own deadline first); it also bounds connecting, which
  // Gloo waits for up to 5x this, so it stays close to the group's timeout.
  context->setTimeout(*options_.timeout + kGlooBackstop);
  try {
    context->connect_pairs(store, device_, *options_.timeout);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw_error(ErrorKind::kComm, "gloo rendezvous in " + store->describe() + " (rank " + std::to_string(rank_) + ")",
                without_source_location(e.what()) + rendezvous_failure_hint(e.what(), size_, meshes));
  }
  return context;
}

void GlooProcessGroup::connect_peers(const std::vector<int>& peers) {
  if (!lazy_mesh_) return;
  try {
    lazy_mesh_->connect_peers(peers, [this](const std::vector<int>& added) { sockets_->add(*context_, added); });
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    std::string listed;
    for (int peer : peers) listed += (listed.empty() ? "" : ", ") + std::to_string(peer);
    throw_error(ErrorKind::kComm, "gloo rank " + rank_text(rank_) + " connecting to ranks " + listed,
                without_source_location(e.what()));
  }
}

void GlooProcessGroup::connect_for(PeerSet set, int root) {
  if (!lazy_mesh_) return;
  if (set == PeerSet::kBroadcastPeers ? root_connected_[static_cast<size_t>(root)]
                                 : set_connected_[static_cast<size_t>(set)])
    return;
  switch (set) {
    case PeerSet::kRingPeers: connect_peers(ring_peers(rank_, size_)); break;
    case PeerSet::kHalvingDoublingPeers: connect_peers(halving_doubling_peers(rank_, size_)); break;
    case PeerSet::kBarrierPeers: connect_peers(barrier_peers(rank_, size_)); break;
    case PeerSet::kBroadcastPeers: connect_peers(broadcast_peers(rank_, size_, root)); break;
  }
  if (set == PeerSet::kBroadcastPeers) {
    root_connected_[static_cast<size_t>(root)] = true;
  } else {
    set_connected_[static_cast<size_t>(set)] = true;
  }
}

void GlooProcessGroup::agree_on_synchronous_use() {
  size_t wmem_max = 0;
  if (std::FILE* file = std::fopen("/proc/sys/net/core/wmem_max", "r")) {
    unsigned long long value = 0;
    if (std::fscanf(file, "%llu", &value) == 1) wmem_max = static_cast<size_t>(value);
    std::fclose(file);
  }
  // Both published before waiting for either, so the agreement costs one store round trip.
  const auto key = [](const char* name, int rank) { return std::string(name) + "/" + std::to_string(rank); };
  store_->set(key("sync_max_bytes", rank_), std::to_string(sync_max_bytes_for(wmem_max)));
  store_->set(key("peers_on_this_host", rank_), sockets_->all_on_this_host() ? "1" : "0");
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) {
    keys.push_back(key("sync_max_bytes", r));
    keys.push_back(key("peers_on_this_host", r));
  }
  store_->wait(keys, *options_.timeout);
  const auto malformed = [&](const std::string& name, const std::string& text, const char* expected) {
    throw_error(ErrorKind::kComm, "gloo rendezvous in " + store_->describe(),
                "key '" + name + "' holds '" + text + "', expected " + expected +
                    " (is another program using this store?)");
  };
  sync_max_bytes_ = kSyncMaxBytes;
  peers_on_this_host_ = true;
  for (int r = 0; r < size_; ++r) {
    const std::string limit = store_->get(key("sync_max_bytes", r), *options_.timeout);
    const std::optional<int64_t> value = try_parse_int(limit, 0);
    if (!value) malformed(key("sync_max_bytes", r), limit, "a byte count");
    sync_max_bytes_ = std::min(sync_max_bytes_, static_cast<size_t>(*value));
    const std::string local = store_->get(key("peers_on_this_host", r), *options_.timeout);
    if (local != "0" && local != "1") malformed(key("peers_on_this_host", r), local, "0 or 1");
    peers_on_this_host_ = peers_on_this_host_ && local == "1";
  }
}

void GlooProcessGroup::shut_down_meshes() {
  if (sockets_) sockets_->shut_down();
  if (sync_sockets_) sync_sockets_->shut_down();
}

GlooProcessGroup::~GlooProcessGroup() {
  bool abandoned;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    closing_ = true;  // no collective starts from now on
    // An operation still running would otherwise wait out its timeout.
    if (in_flight_) shut_down_meshes();
    abandoned = in_flight_ || pending_.load() > 0;
  }
  if (lazy_mesh_) lazy_mesh_->abort_connecting();
  if (point_to_point_.abort_pending()) abandoned = true;
  if (abandoned) queue_.mark_broken("the group was destroyed with operations still queued or running");
  if (context_) say_goodbye();
}

void GlooProcessGroup::say_goodbye() {
  // Gloo fails a wait whose data has arrived if the connection closes before
  // the waiting thread wakes up, so a rank that closes right after its last
  // operation can fail a slower peer's last operation. Every rank therefore
  // records in the store that it is done and, while the group is healthy,
  // closes only once all ranks have, or after kGoodbyeWait: the window it
  // protects is the few milliseconds after a peer's last operation, not
  // whatever the peer computes before it destroys its group. One counter,
  // not a key per rank: each poll is one small command whatever the size.
  try {
    store_->add("bye", 1);
    const bool connected = sockets_->all_open() && (!sync_sockets_ || sync_sockets_->all_open());
    if (queue_.broken() || !connected) return;
    poll_until(std::min(*options_.timeout, kGoodbyeWait), [&] { return store_->add("bye", 0) >= size_; });
  } catch (const std::exception&) {
    // A store that fails now only costs the protection above.
  }
}

std::string GlooProcessGroup::rank_text(int rank) const {
  const int global = global_ranks_[static_cast<size_t>(rank)];
  return std::to_string(rank) + (global == rank ? "" : " (global rank " + std::to_string(global) + ")");
}

void GlooProcessGroup::check_tensor(const Tensor& tensor, const char* op) const {
  if (!tensor.defined())
    throw_error(ErrorKind::kUsage, std::string("gloo ") + op, "the tensor is undefined; pass an allocated tensor");
}

std::shared_ptr<Work> GlooProcessGroup::submit(const std::string& name, const std::string& details,
                                               const CollectiveOptions& options, std::function<void(const Op&)> body) {
  std::lock_guard<std::mutex> lock(submit_mutex_);
  Op op{name + " #" + std::to_string(++seq_) + (details.empty() ? "" : " (" + details + ")"), seq_,
        effective(options.timeout)};
  if (!options.background && pending_.load(std::memory_order_acquire) == 0 && !queue_.broken()) {
    auto work = std::make_shared<Work>(op.description);
    work->start();
    try {
      run_collective(op, body);
      work->finish();
    } catch (const std::exception& e) {
      work->finish(std::current_exception());
      queue_.mark_broken(op.description + " failed: " + e.what());
    }
    return work;
  }
  pending_.fetch_add(1, std::memory_order_acq_rel);
  return queue_.enqueue(op.description, [this, op, body = std::move(body)] {
    struct Done {
      std::atomic<int>& pending;
      ~Done() { pending.fetch_sub(1, std::memory_order_acq_rel); }
    } done{pending_};
    run_collective(op, body);
  });
}

void GlooProcessGroup::run_collective(const Op& op, const std::function<void(const Op&)>& body) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (closing_) throw_error(ErrorKind::kComm, "gloo " + op.description, "cancelled: the group is being destroyed");
    in_flight_ = true;
  }
  watchdog_->arm(Clock::now() + op.timeout);
  std::exception_ptr error;
  try {
    body(op);
  } catch (...) {
    error = std::current_exception();
  }
  const bool expired = watchdog_->disarm();
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    in_flight_ = false;
  }
  if (error || expired) fail(op, error, expired);
}

void GlooProcessGroup::fail(const Op& op, std::exception_ptr error, bool expired) {
  // Tell every peer now, rather than letting each wait out its own deadline.
  shut_down_meshes();
  std::string cause;
  bool timed_out = expired;
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kTimeout && e.kind() != ErrorKind::kComm) {
        queue_.mark_broken("gloo " + op.description + " failed: " + e.what());
        throw;  // a bug or a usage error: reported as it is
      }
      cause = e.what();
      timed_out = timed_out || e.kind() == ErrorKind::kTimeout;
    } catch (const std::exception& e) {
      cause = without_source_location(e.what());
      timed_out = timed_out || mentions_timeout(cause);
    }
  }
  bool closing;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    closing = closing_;
  }
  if (closing) {
    const std::string message = "gloo " + op.description + ": cancelled: the group was destroyed while it ran";
    queue_.mark_broken(message);
    throw Error(ErrorKind::kComm, message);
  }
  CensusResult census = take_failure_census(*store_, op.seq, rank_, size_, timed_out, census_grace(op.timeout));
  timed_out = timed_out || census.any_timed_out;
  std::string message =
      timed_out ? "timed out after " + duration_text(op.timeout) : "lost the connection to a peer (" + cause + ")";
  const RankName name = [this](int r) { return rank_text(r); };
  std::string earlier;  // "rank 1 failed earlier, in #6": it had not finished the previous operation
  for (const auto& [r, seq] : census.earlier) {
    earlier += (earlier.empty() ? "" : "; ") + ranks_list({r}, name) + " failed earlier, in #" + std::to_string(seq);
  }
  if (census.available && !census.missing.empty()) {
    message += "; " + arrival_report(census.missing, census.reached, name, earlier);
  } else if (census.available && earlier.empty()) {
    message += "; every rank reached this operation, so the connection between them failed";
  } else if (census.available) {
    message += "; no rank is missing (" + earlier + "), so the connection between them failed";
  }
  if (timed_out && !cause.empty() && !expired) message += " [" + cause + "]";
  message = "gloo " + op.description + ": " + message;
  // Broken before the Work fails, so a caller that sees the error also sees broken().
  queue_.mark_broken(message);
  throw Error(timed_out ? ErrorKind::kTimeout : ErrorKind::kComm, message);
}

void GlooProcessGroup::run_allreduce(void* data, int64_t count, DType dtype, ReduceOp reduce, Millis wait_timeout) {
  if (size_ == 1 || count == 0) return;
  float* values = static_cast<float*>(data);
  if (dtype == DType::kBF16) {
    if (!bf16_runs_widened(count, peers_on_this_host_, sync_max_bytes_)) {
      connect_for(PeerSet::kRingPeers);
      bf16_ring_allreduce(*context_, static_cast<uint16_t*>(data), count, reduce, wait_timeout, ring_scratch_.bf16);
      return;
    }
    if (staging_.size() < static_cast<size_t>(count)) staging_.resize(static_cast<size_t>(count));
    const uint16_t* src = static_cast<const uint16_t*>(data);
    for (int64_t i = 0; i < count; ++i) staging_[static_cast<size_t>(i)] = bf16_to_float(src[i]);
    values = staging_.data();
  }
  const ReduceOp gloo_op = reduce == ReduceOp::kAvg ? ReduceOp::kSum : reduce;
  const size_t piece_bytes =
      allreduce_piece_bytes(static_cast<size_t>(count) * sizeof(float), peers_on_this_host_, sync_max_bytes_);
  const int64_t step = piece_bytes ? static_cast<int64_t>(piece_bytes / sizeof(float)) : AllreduceCache::kMaxCount;
  for (int64_t offset = 0; offset < count; offset += step) {
    const int64_t piece = std::min(step, count - offset);
    const size_t bytes = static_cast<size_t>(piece) * sizeof(float);
    const auto algorithm = choose_allreduce_algorithm(bytes, size_);
    connect_for(algorithm == AllreduceAlgorithm::kHalvingDoubling ? PeerSet::kHalvingDoublingPeers
                                                                  : PeerSet::kRingPeers);
    AllreduceCache& cache = runs_synchronously(bytes, algorithm, sync_max_bytes_) ? *sync_cache_ : *cache_;
    cache.run(algorithm, values + offset, piece, gloo_op);
  }
  if (reduce == ReduceOp::kAvg) divide_buffer(values, count, static_cast<float>(size_));
  if (dtype == DType::kBF16) {
    uint16_t* dst = static_cast<uint16_t*>(data);
    for (int64_t i = 0; i < count; ++i) dst[i] = float_to_bf16(values[i]);
  }
}

std::string GlooProcessGroup::allreduce_algorithm(size_t bytes) const {
  const size_t piece_bytes = allreduce_piece_bytes(bytes, peers_on_this_host_, sync_max_bytes_);
  if (piece_bytes == 0) return algorithm_name(choose_allreduce_algorithm(bytes, size_));
  return std::string(algorithm_name(choose_allreduce_algorithm(piece_bytes, size_))) + " in " +
         std::to_string(piece_bytes >> 10) + " KiB pieces";
}

std::shared_ptr<Work> GlooProcessGroup::allreduce(Tensor& tensor, const AllreduceOptions& options) {
  check_tensor(tensor, "allreduce");
  return submit("allreduce", tensor_text(tensor) + ", " + reduce_op_name(options.op), options,
                [this, held = tensor, reduce = options.op](const Op& op) mutable {
                  run_allreduce(held.raw(), held.numel(), held.dtype(), reduce, op.gloo_timeout());
                });
}

std::shared_ptr<Work> GlooProcessGroup::broadcast(Tensor& tensor, const BroadcastOptions& options) {
  check_tensor(tensor, "broadcast");
  if (options.root < 0 || options.root >= size_)
    throw_error(ErrorKind::kUsage, "gloo broadcast",
                "root " + std::to_string(options.root) + " is not a rank of this group of " + std::to_string(size_));
  return submit("broadcast", tensor_text(tensor) + ", root " + std::to_string(options.root), options,
                [this, held = tensor, root = options.root](const Op& op) mutable {
                  if (size_ == 1 || held.nbytes() == 0) return;
                  connect_for(PeerSet::kBroadcastPeers, root);
                  gloo::BroadcastOptions opts(context_);
                  opts.setOutput(static_cast<uint8_t*>(held.raw()), held.nbytes());
                  opts.setRoot(root);
                  opts.setTimeout(op.gloo_timeout());
                  gloo::broadcast(opts);
                });
}

std::shared_ptr<Work> GlooProcessGroup::allgather(const Tensor& in, Tensor& out, const CollectiveOptions& options) {
  check_tensor(in, "allgather");
  check_tensor(out, "allgather");
  if (out.dtype() != in.dtype() || out.numel() != in.numel() * size_)
    throw_error(ErrorKind::kShape, "gloo allgather",
                "out must hold size() x in = " + std::to_string(size_) + " x " + tensor_text(in) + ", found " +
                    tensor_text(out));
  return submit("allgather", tensor_text(in) + " per rank", options,
                [this, source = in, held = out](const Op& op) mutable {
                  if (held.nbytes() == 0) return;
                  auto* in_bytes = static_cast<uint8_t*>(const_cast<void*>(source.raw()));
                  auto* out_bytes = static_cast<uint8_t*>(held.raw());
                  if (size_ == 1) {
                    if (in_bytes != out_bytes) std::memcpy(out_bytes, in_bytes, held.nbytes());
                    return;
                  }
                  connect_for(PeerSet::kRingPeers);
                  gloo::AllgatherOptions opts(context_);
                  opts.setInput(in_bytes, source.nbytes());
                  opts.setOutput(out_bytes, held.nbytes());
                  opts.setTimeout(op.gloo_timeout());
                  gloo::allgather(opts);
                });
}

std::shared_ptr<Work> GlooProcessGroup::reduce_scatter(const Tensor& in, Tensor& out, const AllreduceOptions& options) {
  check_tensor(in, "reduce_scatter");
  check_tensor(out, "reduce_scatter");
  if (out.dtype() != in.dtype() || in.numel() != out.numel() * size_)
    throw_error(ErrorKind::kShape, "gloo reduce_scatter",
                "in must hold size() x out = " + std::to_string(size_) + " x " + tensor_text(out) + ", found " +
                    tensor_text(in));
  return submit("reduce_scatter", tensor_text(out) + " per rank, " + reduce_op_name(options.op), options,
                [this, source = in, held = out, reduce = options.op](const Op& op) mutable {
                  if (held.nbytes() == 0) return;
                  if (size_ == 1) {
                    std::memcpy(held.raw(), source.raw(), held.nbytes());
                    return;
                  }
                  connect_for(PeerSet::kRingPeers);
                  ring_reduce_scatter(*context_, source.raw(), held.raw(), held.numel(), held.dtype(), reduce,
                                      op.gloo_timeout(), ring_scratch_);
                });
}

std::shared_ptr<Work> GlooProcessGroup::barrier(const CollectiveOptions& options) {
  return submit("barrier", "", options, [this](const Op& op) {
    if (size_ == 1) return;
    connect_for(PeerSet::kBarrierPeers);
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(op.gloo_timeout());
    gloo::barrier(opts);
  });
}

std::shared_ptr<Work> GlooProcessGroup::send(const Tensor& tensor, int dst, int tag, const CollectiveOptions& options) {
  check_tensor(tensor, "send");
  return point_to_point_.post(context_.get(), /*sending=*/true, tensor, dst, tag, effective(options.timeout));
}

std::shared_ptr<Work> GlooProcessGroup::recv(Tensor& tensor, int src, int tag, const CollectiveOptions& options) {
  check_tensor(tensor, "recv");
  return point_to_point_.post(context_.get(), /*sending=*/false, tensor, src, tag, effective(options.timeout));
}

std::shared_ptr<ProcessGroup> GlooProcessGroup::new_group(const std::vector<int>& ranks) {
  bool valid = !ranks.empty();
  for (size_t i = 0; valid && i < ranks.size(); ++i)
    valid = ranks[i] >= 0 && ranks[i] < size_ && (i == 0 || ranks[i] > ranks[i - 1]);
  if (!valid)
    throw_error(ErrorKind::kUsage, "gloo new_group",
                "ranks must be ascending, unique and within 0.." + std::to_string(size_ - 1));
  int index;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    index = subgroups_++;
  }
  auto member = std::find(ranks.begin(), ranks.end(), rank_);
  if (member == ranks.end()) return nullptr;
  std::vector<int> globals;
  for (int r : ranks) globals.push_back(global_ranks_[static_cast<size_t>(r)]);
  auto store = std::make_shared<PrefixStore>(store_, "sub" + std::to_string(index));
  return std::make_shared<GlooProcessGroup>(store, static_cast<int>(member - ranks.begin()),
                                            static_cast<int>(ranks.size()), options_, device_, std::move(globals));
}

}  // namespace
}  // namespace gloo_backend

namespace {

// Gloo writes to its TCP sockets with writev(), which cannot pass
// MSG_NOSIGNAL: when a peer dies, the next write raises SIGPIPE, whose default
// action kills this process before the failure can be reported ("rank 2 did
// not arrive"). Like Python (and with it PyTorch), ignore SIGPIPE, unless the
// program installed a handler of its own; writes then fail with EPIPE, which
// Gloo turns into an error.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace

std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      const ProcessGroupOptions& options) {
  ignore_sigpipe();
  if (!store) throw_error(ErrorKind::kUsage, "gloo", "a store is required for the rendezvous");
  if (size < 1 || rank < 0 || rank >= size)
    throw_error(ErrorKind::kUsage, "gloo",
                "rank " + std::to_string(rank) + " is not within a group of size " + std::to_string(size));
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) ranks[static_cast<size_t>(r)] = r;
  // Every rank creates its groups in the same order, so the n-th group of
  // each rank meets the others' n-th under "gloo/<n>/": several groups can
  // share one store without reading each other's addresses.
  const int64_t instance = store->add("gloo/instances/" + std::to_string(rank), 1);
  auto prefixed = std::make_shared<PrefixStore>(std::move(store), "gloo/" + std::to_string(instance));
  ProcessGroupOptions resolved = options;
  resolved.timeout = group_timeout(options);
  return std::make_shared<gloo_backend::GlooProcessGroup>(std::move(prefixed), rank, size, resolved, nullptr,
                                                          std::move(ranks));
}

}  // namespace gradmesh::comm
