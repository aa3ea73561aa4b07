#include "gradmesh/comm/gloo/ring_reduce_scatter.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstring>
#include <memory>

#include "gradmesh/comm/gloo/bf16_ring.h"
#include "gradmesh/comm/gloo/slots.h"
#include "gradmesh/comm/gloo/unbound_waits.h"
#include "gradmesh/comm/reduce.h"

namespace gradmesh::comm::gloo_backend {
namespace {

constexpr const char* kCollective = "reduce-scatter";

void f32_ring_reduce_scatter(gloo::Context& context, const float* in, float* out, int64_t count, ReduceOp op,
                             std::chrono::milliseconds wait_timeout, std::vector<float>& scratch) {
  const int n = context.size;
  const int rank = context.rank;
  auto chunk = [&](int c) { return in + static_cast<size_t>(c) * static_cast<size_t>(count); };
  auto ring = [n](int x) { return ((x % n) + n) % n; };
  const size_t partial_bytes = static_cast<size_t>(count) * sizeof(float);
  if (scratch.size() < 2 * static_cast<size_t>(count)) scratch.resize(2 * static_cast<size_t>(count));
  float* half[2] = {scratch.data(), scratch.data() + count};
  // One unbound buffer per half: Gloo allows one pending operation per buffer.
  std::unique_ptr<gloo::transport::UnboundBuffer> half_buffer[2] = {
      context.createUnboundBuffer(half[0], partial_bytes), context.createUnboundBuffer(half[1], partial_bytes)};
  // Step 0 sends this rank's own piece of chunk r-1 straight from the input.
  std::unique_ptr<gloo::transport::UnboundBuffer> first_send =
      context.createUnboundBuffer(const_cast<float*>(chunk(ring(rank - 1))), partial_bytes);

  const int left = ring(rank - 1), right = ring(rank + 1);
  parking_buffers_on_error({&half_buffer[0], &half_buffer[1], &first_send}, [&] {
    for (int step = 0; step < n - 1; ++step) {
      gloo::transport::UnboundBuffer& incoming = *half_buffer[step % 2];
      gloo::transport::UnboundBuffer& outgoing = step == 0 ? *first_send : *half_buffer[(step + 1) % 2];
      incoming.recv(left, kReduceScatterSlot);
      outgoing.send(right, kReduceScatterSlot);
      wait_recv_or_throw(incoming, wait_timeout, kCollective);
      combine_into(half[step % 2], chunk(ring(rank - step - 2)), count, DType::kF32, op);
      // The half just sent receives in the next step: its send must be done.
      wait_send_or_throw(outgoing, wait_timeout, kCollective);
    }
  });
  float* result = half[(n - 2) % 2];
  if (op == ReduceOp::kAvg) divide_buffer(result, count, static_cast<float>(n));
  std::memcpy(out, result, partial_bytes);
}

}  // namespace

void ring_reduce_scatter(gloo::Context& context, const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                         std::chrono::milliseconds wait_timeout, RingScratch& scratch) {
  if (count == 0) return;
  if (context.size == 1) {
    std::memcpy(out, in, static_cast<size_t>(count) * dtype_size(dtype));
    return;
  }
  if (dtype == DType::kBF16) {
    bf16_ring_reduce_scatter(context, static_cast<const uint16_t*>(in), RingChunks(count * context.size, context.size),
                             static_cast<uint16_t*>(out), op, kReduceScatterSlot, wait_timeout, scratch.bf16);
    return;
  }
  f32_ring_reduce_scatter(context, static_cast<const float*>(in), static_cast<float*>(out), count, op, wait_timeout,
                          scratch.f32);
}

}  // namespace gradmesh::comm::gloo_backend
