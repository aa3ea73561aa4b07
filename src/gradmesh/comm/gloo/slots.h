// Transport slots for the unbound-buffer traffic the gloo backend sends itself.
//
// A slot names a message stream between two ranks; receives match sends in
// order within one (pair, slot). Gloo's own collectives derive theirs from
// small prefixes (gloo/types.h), and its bound-buffer algorithms use a
// separate table, so a top byte of 0xD0-0xDF never meets them.
#pragma once

#include <cstdint>

namespace gradmesh::comm::gloo_backend {

inline constexpr uint64_t kReduceScatterSlot = uint64_t{0xD1} << 56;
// Point-to-point: the user's tag (0 .. 2^32-1) in the low bits.
inline constexpr uint64_t kPointToPointSlotBase = uint64_t{0xD2} << 56;
// The BF16 ring all-reduce's two phases (bf16_ring.h).
inline constexpr uint64_t kBf16AllreduceScatterSlot = uint64_t{0xD3} << 56;
inline constexpr uint64_t kBf16AllreduceGatherSlot = uint64_t{0xD4} << 56;

}  // namespace gradmesh::comm::gloo_backend
