#include "gradmesh/comm/shm/collectives.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "gradmesh/comm/reduce.h"
#include "gradmesh/comm/traffic_meter.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/text_format.h"

namespace gradmesh::comm::shm {
namespace {

constexpr size_t kLine = 64;

// Elements per cache line: slices start on line boundaries so two ranks
// writing neighbouring slices never share a line.
int64_t line_elems(size_t esize) { return static_cast<int64_t>(kLine / esize); }

// Rank r's slice [lo, hi) of a chunk of n elements.
struct Slice {
  int64_t lo, hi;
};
Slice slice_of(int64_t n, int rank, int size, size_t esize) {
  const int64_t align = line_elems(esize);
  const int64_t per = ((n + size - 1) / size + align - 1) / align * align;
  const int64_t lo = std::min(n, per * rank);
  return {lo, std::min(n, lo + per)};
}

// Elements of `esize` bytes that fit in `bytes`, whole cache lines only.
int64_t fit(size_t bytes, size_t esize) { return static_cast<int64_t>(bytes / kLine * kLine / esize); }

}  // namespace

class Collectives::Hooks : public WaitHooks {
 public:
  Hooks(Collectives& owner, const OpContext& ctx, std::span<const int> ranks)
      : owner_(owner), ctx_(ctx), ranks_(ranks) {}

  void after_sleep() override {
    if (owner_.shutting_down_.load(std::memory_order_acquire))
      throw_error(ErrorKind::kComm, ctx_.what, "cancelled: the group is being destroyed");
    const int aborted_by = owner_.segment_->header().aborted_by.load(std::memory_order_acquire);
    if (aborted_by != 0) {
      const RankRecord& record = owner_.segment_->rank_record(aborted_by - 1);
      throw_error(static_cast<ErrorKind>(record.failure_kind), ctx_.what,
                  "rank " + std::to_string(owner_.world_ranks_[aborted_by - 1]) + " stopped the group: " +
                      std::string(record.failure, strnlen(record.failure, sizeof record.failure)));
    }
  }

  void periodic(std::span<const int> pending) override {
    for (int index : pending) {
      const int rank = ranks_[index];
      if (!owner_.watchable_[rank]) continue;
      RankRecord& record = owner_.segment_->rank_record(rank);
      const ProcessIdentity process{record.pid.load(std::memory_order_acquire), record.start_time};
      if (!process_alive(process))
        throw_error(ErrorKind::kComm, ctx_.what,
                    "rank " + std::to_string(owner_.world_ranks_[rank]) + " (pid " + std::to_string(process.pid) +
                        ") died before it arrived; see that rank's log for why");
    }
  }

 private:
  Collectives& owner_;
  const OpContext& ctx_;
  std::span<const int> ranks_;
};

Collectives::Collectives(std::unique_ptr<Segment> segment, int rank, std::vector<int> world_ranks)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(segment_->layout().size),
      world_ranks_(std::move(world_ranks)),
      sent_(size_, 0),
      received_(size_, 0) {
  for (int r = 0; r < size_; ++r) {
    progress_counters_.push_back(&segment_->progress(r));
    all_ranks_.push_back(r);
    // Every rank was alive when the group formed; one we cannot see now runs
    // in another pid namespace (a container sharing only /dev/shm), and only
    // its timeout can tell that it is gone.
    const RankRecord& record = segment_->rank_record(r);
    watchable_.push_back(process_alive({record.pid.load(std::memory_order_acquire), record.start_time}));
  }
}

void Collectives::throw_timeout(const std::vector<int>& missing, const OpContext& ctx) {
  std::string names;
  for (size_t i = 0; i < missing.size(); ++i) names += (i ? ", " : "") + std::to_string(world_ranks_[missing[i]]);
  throw_error(ErrorKind::kTimeout, ctx.what,
              "timed out after " + seconds_text(ctx.timeout) + "; rank" + (missing.size() == 1 ? " " : "s ") + names +
                  " did not arrive");
}

void Collectives::wait_all(uint32_t target, const OpContext& ctx) {
  Hooks hooks(*this, ctx, all_ranks_);
  if (wait_reached(progress_counters_, target, ctx.deadline, hooks)) return;
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r)
    if (!reached(progress_counters_[r]->value.load(std::memory_order_acquire), target)) missing.push_back(r);
  throw_timeout(missing, ctx);
}

void Collectives::wait_peer(SharedCounter& counter, int peer, uint32_t target, const OpContext& ctx) {
  SharedCounter* counters[] = {&counter};
  const int ranks[] = {peer};
  Hooks hooks(*this, ctx, ranks);
  if (!wait_reached(counters, target, ctx.deadline, hooks)) throw_timeout({peer}, ctx);
}

int Collectives::claim_region(const OpContext& ctx) {
  next_buffer_ ^= 1;
  wait_all(free_after_[next_buffer_], ctx);
  return next_buffer_;
}

void Collectives::allreduce(void* data, int64_t count, DType dtype, ReduceOp op, const OpContext& ctx) {
  if (size_ == 1) return;  // reducing one input rounds nothing (bf16 in, bf16 out)
  const size_t esize = dtype_size(dtype);
  const size_t slot_bytes = segment_->layout().region_bytes / (size_ + 1) / kLine * kLine;
  if (count * esize <= kSmallAllreduceBytes) return allreduce_small(data, count, dtype, op, slot_bytes, ctx);
  const int64_t chunk = fit(slot_bytes, esize);
  auto* user = static_cast<std::byte*>(data);

  // A chunk in flight: where it lives in the tensor and in the segment.
  struct Chunk {
    std::byte* here;
    int64_t n;
    int buffer;
    Slice own;
    uint32_t copied_in;  // progress once every rank copied it in
  };
  uint64_t sent = 0, received = 0;  // into and out of the segment, for the traffic meter
  // Step 1: publish everything but our own slice (we read that from `here`).
  auto copy_in = [&](int64_t offset) {
    Chunk c{user + offset * esize, std::min(chunk, count - offset), claim_region(ctx), {}, 0};
    c.own = slice_of(c.n, rank_, size_, esize);
    std::byte* mine = segment_->region(c.buffer) + rank_ * slot_bytes;
    std::memcpy(mine, c.here, c.own.lo * esize);
    std::memcpy(mine + c.own.hi * esize, c.here + c.own.hi * esize, (c.n - c.own.hi) * esize);
    sent += static_cast<uint64_t>(c.n - (c.own.hi - c.own.lo)) * esize;
    advance();
    c.copied_in = progress_;
    return c;
  };

  std::vector<const void*> inputs(size_);
  Chunk current = copy_in(0);
  for (int64_t offset = 0; offset < count; offset += chunk) {
    std::byte* region = segment_->region(current.buffer);
    std::byte* result = region + size_ * slot_bytes;
    // Step 2: reduce our slice across all ranks, in rank order.
    wait_all(current.copied_in, ctx);
    for (int r = 0; r < size_; ++r)
      inputs[r] = (r == rank_ ? current.here : region + r * slot_bytes) + current.own.lo * esize;
    const Slice own = current.own;
    reduce_buffers(inputs.data(), size_, result + own.lo * esize, own.hi - own.lo, dtype, op);
    received += static_cast<uint64_t>(size_ - 1) * static_cast<uint64_t>(own.hi - own.lo) * esize;
    sent += static_cast<uint64_t>(own.hi - own.lo) * esize;
    advance();
    const uint32_t reduced = progress_;
    // Our own slice of the result is in this core's cache now, and no other
    // rank reads our tensor: take it out before waiting for the others.
    std::memcpy(current.here + own.lo * esize, result + own.lo * esize, (own.hi - own.lo) * esize);
    // Pipelining: copy the next chunk into the other region while slower
    // ranks finish reducing this one.
    const bool more = offset + chunk < count;
    Chunk next = more ? copy_in(offset + chunk) : current;
    // Step 3: every slice is reduced; take the others' slices.
    wait_all(reduced, ctx);
    std::memcpy(current.here, result, own.lo * esize);
    std::memcpy(current.here + own.hi * esize, result + own.hi * esize, (current.n - own.hi) * esize);
    received += static_cast<uint64_t>(current.n - (own.hi - own.lo)) * esize;
    advance();
    release_region(current.buffer);
    current = next;
  }
  count_traffic(TrafficBackend::kShm, sent, received, /*inter_host=*/false);
}

void Collectives::allreduce_small(void* data, int64_t count, DType dtype, ReduceOp op, size_t slot_bytes,
                                  const OpContext& ctx) {
  const size_t bytes = count * dtype_size(dtype);
  const int buffer = claim_region(ctx);
  std::byte* region = segment_->region(buffer);
  std::memcpy(region + rank_ * slot_bytes, data, bytes);
  advance();
  wait_all(progress_, ctx);
  // Every rank reduces the whole message from the slots, in rank order, so
  // all of them compute bit-identical results.
  std::vector<const void*> inputs(size_);
  for (int r = 0; r < size_; ++r) inputs[r] = region + r * slot_bytes;
  reduce_buffers(inputs.data(), size_, data, count, dtype, op);
  advance();
  release_region(buffer);
  count_traffic(TrafficBackend::kShm, bytes, static_cast<uint64_t>(size_ - 1) * bytes, /*inter_host=*/false);
}

void Collectives::broadcast(void* data, int64_t count, DType dtype, int root, const OpContext& ctx) {
  if (size_ == 1) return;
  const size_t esize = dtype_size(dtype);
  const int64_t chunk = fit(segment_->layout().region_bytes, esize);
  auto* user = static_cast<std::byte*>(data);
  for (int64_t offset = 0; offset < count; offset += chunk) {
    const int64_t n = std::min(chunk, count - offset);
    const int buffer = claim_region(ctx);
    std::byte* region = segment_->region(buffer);
    // P+1: root's chunk is in the region; P+2: this rank is done with it.
    // Root never reads it back, so it jumps straight to P+2.
    if (rank_ == root) {
      std::memcpy(region, user + offset * esize, n * esize);
      count_traffic(TrafficBackend::kShm, n * esize, 0, /*inter_host=*/false);
      advance(2);
    } else {
      wait_peer(segment_->progress(root), root, progress_ + 1, ctx);
      std::memcpy(user + offset * esize, region, n * esize);
      count_traffic(TrafficBackend::kShm, 0, n * esize, /*inter_host=*/false);
      advance(2);
    }
    release_region(buffer);
  }
}

void Collectives::allgather(const void* in, void* out, int64_t count, DType dtype, const OpContext& ctx) {
  const size_t esize = dtype_size(dtype);
  const auto* source = static_cast<const std::byte*>(in);
  auto* target = static_cast<std::byte*>(out);
  std::byte* own_target = target + rank_ * count * esize;
  if (own_target != source) std::memmove(own_target, source, count * esize);
  if (size_ == 1) return;
  const size_t slot_bytes = segment_->layout().region_bytes / size_ / kLine * kLine;
  const int64_t chunk = fit(slot_bytes, esize);
  for (int64_t offset = 0; offset < count; offset += chunk) {
    const int64_t n = std::min(chunk, count - offset);
    const int buffer = claim_region(ctx);
    std::byte* region = segment_->region(buffer);
    std::memcpy(region + rank_ * slot_bytes, source + offset * esize, n * esize);
    advance();
    wait_all(progress_, ctx);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) std::memcpy(target + (r * count + offset) * esize, region + r * slot_bytes, n * esize);
    count_traffic(TrafficBackend::kShm, n * esize, static_cast<uint64_t>(size_ - 1) * n * esize, /*inter_host=*/false);
    advance();
    release_region(buffer);
  }
}

void Collectives::reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                                 const OpContext& ctx) {
  const size_t esize = dtype_size(dtype);
  const auto* source = static_cast<const std::byte*>(in);
  auto* target = static_cast<std::byte*>(out);
  if (size_ == 1) {
    const void* only[] = {source};
    reduce_buffers(only, 1, target, count, dtype, op);
    return;
  }
  // Each rank's slot holds one piece per destination rank.
  const size_t slot_bytes = segment_->layout().region_bytes / size_ / kLine * kLine;
  const size_t piece_bytes = slot_bytes / size_ / kLine * kLine;
  const int64_t chunk = fit(piece_bytes, esize);
  std::vector<const void*> inputs(size_);
  for (int64_t offset = 0; offset < count; offset += chunk) {
    const int64_t n = std::min(chunk, count - offset);
    const int buffer = claim_region(ctx);
    std::byte* region = segment_->region(buffer);
    std::byte* mine = region + rank_ * slot_bytes;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) std::memcpy(mine + r * piece_bytes, source + (r * count + offset) * esize, n * esize);
    advance();
    wait_all(progress_, ctx);
    for (int r = 0; r < size_; ++r)
      inputs[r] = r == rank_ ? source + (rank_ * count + offset) * esize : region + r * slot_bytes + rank_ * piece_bytes;
    reduce_buffers(inputs.data(), size_, target + offset * esize, n, dtype, op);
    const uint64_t pieces = static_cast<uint64_t>(size_ - 1) * n * esize;
    count_traffic(TrafficBackend::kShm, pieces, pieces, /*inter_host=*/false);
    advance();
    release_region(buffer);
  }
}

void Collectives::barrier(const OpContext& ctx) {
  if (size_ == 1) return;
  advance();
  wait_all(progress_, ctx);
}

void Collectives::send(const void* data, int64_t count, DType dtype, int dst, int64_t tag, const OpContext& ctx) {
  MailboxControl& box = segment_->mailbox(rank_, dst);
  const size_t bytes = count * dtype_size(dtype);
  const size_t chunk = segment_->layout().mail_chunk_bytes;
  const int64_t chunks = std::max<int64_t>(1, static_cast<int64_t>((bytes + chunk - 1) / chunk));
  const auto* source = static_cast<const std::byte*>(data);
  for (int64_t i = 0; i < chunks; ++i) {
    const uint64_t k = sent_[dst];
    // Slot k % 2 last held chunk k - 2, consumed once the receiver acked k - 1 chunks.
    if (k >= 2) wait_peer(box.acked, dst, static_cast<uint32_t>(k - 1), ctx);
    const int slot = static_cast<int>(k % 2);
    box.headers[slot] = {tag, count, static_cast<int32_t>(dtype), static_cast<int32_t>(i)};
    const size_t begin = i * chunk;
    std::memcpy(segment_->mail_data(rank_, dst, slot), source + begin, std::min(chunk, bytes - std::min(bytes, begin)));
    count_traffic(TrafficBackend::kShm, std::min(chunk, bytes - std::min(bytes, begin)), 0, /*inter_host=*/false);
    sent_[dst] = k + 1;
    publish(box.sent, static_cast<uint32_t>(k + 1));
  }
}

void Collectives::recv(void* data, int64_t count, DType dtype, int src, int64_t tag, const OpContext& ctx) {
  MailboxControl& box = segment_->mailbox(src, rank_);
  const size_t bytes = count * dtype_size(dtype);
  const size_t chunk = segment_->layout().mail_chunk_bytes;
  const int64_t chunks = std::max<int64_t>(1, static_cast<int64_t>((bytes + chunk - 1) / chunk));
  auto* target = static_cast<std::byte*>(data);
  for (int64_t i = 0; i < chunks; ++i) {
    const uint64_t k = received_[src];
    wait_peer(box.sent, src, static_cast<uint32_t>(k + 1), ctx);
    const int slot = static_cast<int>(k % 2);
    const MessageHeader header = box.headers[slot];
    if (header.tag != tag || header.count != count || header.dtype != static_cast<int32_t>(dtype) || header.chunk != i)
      throw_error(ErrorKind::kComm, ctx.what,
                  "rank " + std::to_string(world_ranks_[src]) + " sent " +
                      dtype_label(static_cast<DType>(header.dtype)) + " x " + std::to_string(header.count) +
                      " with tag " + std::to_string(header.tag) +
                      "; sends and receives between two ranks must be issued in the same order, with the same "
                      "tag, dtype and element count");
    const size_t begin = i * chunk;
    std::memcpy(target + begin, segment_->mail_data(src, rank_, slot), std::min(chunk, bytes - std::min(bytes, begin)));
    count_traffic(TrafficBackend::kShm, 0, std::min(chunk, bytes - std::min(bytes, begin)), /*inter_host=*/false);
    received_[src] = k + 1;
    publish(box.acked, static_cast<uint32_t>(k + 1));
  }
}

void Collectives::abort(ErrorKind kind, const std::string& reason) {
  SegmentHeader& header = segment_->header();
  RankRecord& mine = segment_->rank_record(rank_);
  if (header.aborted_by.load(std::memory_order_acquire) == 0) {
    mine.failure_kind = static_cast<int32_t>(kind);
    const size_t length = std::min(reason.size(), sizeof mine.failure - 1);
    std::memcpy(mine.failure, reason.data(), length);
    mine.failure[length] = '\0';
    int32_t expected = 0;
    header.aborted_by.compare_exchange_strong(expected, rank_ + 1, std::memory_order_acq_rel);
  }
  for (int r = 0; r < size_; ++r) wake_all(segment_->progress(r));
  for (int src = 0; src < size_; ++src)
    for (int dst = 0; dst < size_; ++dst)
      if (src != dst) {
        wake_all(segment_->mailbox(src, dst).sent);
        wake_all(segment_->mailbox(src, dst).acked);
      }
}

}  // namespace gradmesh::comm::shm
