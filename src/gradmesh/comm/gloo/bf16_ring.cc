#include "gradmesh/comm/gloo/bf16_ring.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "gradmesh/comm/gloo/slots.h"
#include "gradmesh/comm/gloo/unbound_waits.h"
#include "gradmesh/core/bf16.h"

namespace gradmesh::comm::gloo_backend {
namespace {

using Buffer = gloo::transport::UnboundBuffer;

constexpr const char* kRing = "bf16 ring";

size_t bytes_of(int64_t elements) { return static_cast<size_t>(elements) * sizeof(uint16_t); }

// result[i] := bf16(apply(received[i], own[i]) / divisor), in float32.
// `result` may alias `received` (a partial rounded in place) or `own` (the
// final chunk of an in-place all-reduce): each element is read before it is written.
template <class Apply>
void combine_hop(const uint16_t* received, const uint16_t* own, uint16_t* result, int64_t count, float divisor,
                 Apply apply) {
  if (divisor == 1.0f) {
    for (int64_t i = 0; i < count; ++i)
      result[i] = float_to_bf16(apply(bf16_to_float(received[i]), bf16_to_float(own[i])));
  } else {
    for (int64_t i = 0; i < count; ++i)
      result[i] = float_to_bf16(apply(bf16_to_float(received[i]), bf16_to_float(own[i])) / divisor);
  }
}

void combine_hop(const uint16_t* received, const uint16_t* own, uint16_t* result, int64_t count, ReduceOp op,
                 float divisor) {
  const auto max = [](float a, float b) { return a > b ? a : b; };
  const auto min = [](float a, float b) { return a < b ? a : b; };
  const auto sum = [](float a, float b) { return a + b; };
  switch (op) {
    case ReduceOp::kMax: return combine_hop(received, own, result, count, divisor, max);
    case ReduceOp::kMin: return combine_hop(received, own, result, count, divisor, min);
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return combine_hop(received, own, result, count, divisor, sum);
  }
}

}  // namespace

void bf16_ring_reduce_scatter(gloo::Context& context, const uint16_t* in, const RingChunks& chunks, uint16_t* out,
                              ReduceOp op, uint64_t slot, std::chrono::milliseconds wait_timeout,
                              std::vector<uint16_t>& scratch) {
  const int n = context.size, rank = context.rank;
  const auto ring = [n](int x) { return ((x % n) + n) % n; };
  if (n == 1) {
    if (out != in) std::memcpy(out, in, bytes_of(chunks.size(0)));
    return;
  }
  const int64_t largest = chunks.largest();
  if (largest == 0) return;
  if (scratch.size() < 2 * static_cast<size_t>(largest)) scratch.resize(2 * static_cast<size_t>(largest));
  // Two halves alternate, so a receive never overwrites a partial still being
  // sent; one unbound buffer each (Gloo allows one pending operation per buffer).
  uint16_t* half[2] = {scratch.data(), scratch.data() + largest};
  std::unique_ptr<Buffer> half_buffer[2] = {context.createUnboundBuffer(half[0], bytes_of(largest)),
                                            context.createUnboundBuffer(half[1], bytes_of(largest))};
  // Step 0 sends this rank's own value straight from the input.
  std::unique_ptr<Buffer> input = context.createUnboundBuffer(const_cast<uint16_t*>(in), bytes_of(chunks.count()));
  const int left = ring(rank - 1), right = ring(rank + 1);
  parking_buffers_on_error({&half_buffer[0], &half_buffer[1], &input}, [&] {
    for (int step = 0; step < n - 1; ++step) {
      const int sent = ring(rank - step - 1), received = ring(rank - step - 2);
      const int64_t sent_count = chunks.size(sent), received_count = chunks.size(received);
      Buffer& incoming = *half_buffer[step % 2];
      Buffer& outgoing = step == 0 ? *input : *half_buffer[(step + 1) % 2];
      const size_t sent_offset = step == 0 ? bytes_of(chunks.begin(sent)) : 0;
      if (received_count > 0) incoming.recv(left, slot, 0, bytes_of(received_count));
      if (sent_count > 0) outgoing.send(right, slot, sent_offset, bytes_of(sent_count));
      if (received_count > 0) {
        wait_recv_or_throw(incoming, wait_timeout, kRing);
        const uint16_t* own = in + chunks.begin(received);
        const bool last = step == n - 2;  // received == rank: the partial is final after this rank's value
        const float divisor = last && op == ReduceOp::kAvg ? static_cast<float>(n) : 1.0f;
        combine_hop(half[step % 2], own, last ? out : half[step % 2], received_count, op, divisor);
      }
      // The half just sent receives in the next step: its send must be done.
      if (sent_count > 0) wait_send_or_throw(outgoing, wait_timeout, kRing);
    }
  });
}

void bf16_ring_allgather(gloo::Context& context, uint16_t* data, const RingChunks& chunks, uint64_t slot,
                         std::chrono::milliseconds wait_timeout) {
  const int n = context.size, rank = context.rank;
  const auto ring = [n](int x) { return ((x % n) + n) % n; };
  if (n == 1 || chunks.count() == 0) return;
  // Sends and receives are in flight together on different chunks of `data`:
  // one buffer for each direction.
  std::unique_ptr<Buffer> outgoing = context.createUnboundBuffer(data, bytes_of(chunks.count()));
  std::unique_ptr<Buffer> incoming = context.createUnboundBuffer(data, bytes_of(chunks.count()));
  const int left = ring(rank - 1), right = ring(rank + 1);
  parking_buffers_on_error({&outgoing, &incoming}, [&] {
    for (int step = 0; step < n - 1; ++step) {
      const int sent = ring(rank - step), received = ring(rank - step - 1);
      const int64_t sent_count = chunks.size(sent), received_count = chunks.size(received);
      if (received_count > 0) incoming->recv(left, slot, bytes_of(chunks.begin(received)), bytes_of(received_count));
      if (sent_count > 0) outgoing->send(right, slot, bytes_of(chunks.begin(sent)), bytes_of(sent_count));
      if (received_count > 0) wait_recv_or_throw(*incoming, wait_timeout, kRing);
      if (sent_count > 0) wait_send_or_throw(*outgoing, wait_timeout, kRing);
    }
  });
}

void bf16_ring_allreduce(gloo::Context& context, uint16_t* data, int64_t count, ReduceOp op,
                         std::chrono::milliseconds wait_timeout, std::vector<uint16_t>& scratch, int64_t segment) {
  const int n = context.size;
  if (n == 1 || count == 0) return;
  for (int64_t offset = 0; offset < count; offset += segment) {
    const RingChunks chunks(std::min(segment, count - offset), n);
    uint16_t* part = data + offset;
    bf16_ring_reduce_scatter(context, part, chunks, part + chunks.begin(context.rank), op, kBf16AllreduceScatterSlot,
                             wait_timeout, scratch);
    bf16_ring_allgather(context, part, chunks, kBf16AllreduceGatherSlot, wait_timeout);
  }
}

}  // namespace gradmesh::comm::gloo_backend
