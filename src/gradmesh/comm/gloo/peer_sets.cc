#include "gradmesh/comm/gloo/peer_sets.h"

#include <algorithm>
#include <cstdint>

namespace gradmesh::comm::gloo_backend {
namespace {

std::vector<int> sorted_unique(std::vector<int> peers, int rank) {
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), rank), peers.end());
  return peers;
}

uint32_t log2_floor(uint32_t n) {
  uint32_t bits = 0;
  while (n > 1) {
    n >>= 1;
    ++bits;
  }
  return bits;
}

// Gloo's reverseLastNBits: the low `n` bits of `value` in reverse order.
uint32_t reverse_low_bits(uint32_t value, uint32_t n) {
  uint32_t reversed = 0;
  for (uint32_t bit = 0; bit < n; ++bit) reversed = (reversed << 1) | ((value >> bit) & 1u);
  return reversed;
}

}  // namespace

std::vector<int> ring_peers(int rank, int size) {
  if (size < 2) return {};
  return sorted_unique({(rank + size - 1) % size, (rank + 1) % size}, rank);
}

std::vector<int> halving_doubling_peers(int rank, int size) {
  if (size < 2) return {};
  const auto n = static_cast<uint32_t>(size), me = static_cast<uint32_t>(rank);
  // The group splits into binary blocks, the largest first (initBinaryBlocks).
  uint32_t offset = n, block = 1, current = 0, previous = 0;
  uint32_t my_offset = 0, my_block = 0, smaller = 0, larger = 0;
  do {
    if (n & block) {
      previous = current;
      current = block;
      offset -= block;
      if (my_block != 0) {
        larger = current;
        break;
      }
      if (offset <= me) {
        my_offset = offset;
        my_block = current;
        smaller = previous;
      }
    }
    block <<= 1;
  } while (offset != 0);
  const uint32_t steps = log2_floor(my_block), in_block = me % my_block;

  std::vector<int> peers;
  for (uint32_t bit = 0; bit < steps; ++bit) peers.push_back(static_cast<int>(me ^ (1u << bit)));
  if (smaller != 0) peers.push_back(static_cast<int>(my_offset + my_block + in_block % smaller));
  if (larger != 0) {
    const uint32_t sends = larger / my_block;
    uint32_t ordinal = reverse_low_bits(in_block, steps) * sends;
    for (uint32_t i = 0; i < sends; ++i, ++ordinal)
      peers.push_back(static_cast<int>(my_offset - larger + reverse_low_bits(ordinal, log2_floor(larger))));
  }
  return sorted_unique(std::move(peers), rank);
}

std::vector<int> broadcast_peers(int rank, int size, int root) {
  if (size < 2) return {};
  const auto vsize = static_cast<uint32_t>(size);
  const uint32_t vrank = static_cast<uint32_t>((rank - root + size) % size);
  uint32_t dim = 0;
  while ((1u << dim) < vsize) ++dim;
  std::vector<int> peers;
  uint32_t mask = (1u << dim) - 1;
  for (uint32_t i = 0; i < dim; ++i) {
    mask ^= 1u << i;
    if ((vrank & mask) != 0) continue;
    const uint32_t vpeer = vrank ^ (1u << i);
    if (vpeer >= vsize) continue;
    peers.push_back(static_cast<int>((vpeer + static_cast<uint32_t>(root)) % vsize));
  }
  return sorted_unique(std::move(peers), rank);
}

std::vector<int> barrier_peers(int rank, int size) {
  std::vector<int> peers;
  for (int d = 1; d < size; d <<= 1) {
    peers.push_back((rank + size - d) % size);
    peers.push_back((rank + d) % size);
  }
  return sorted_unique(std::move(peers), rank);
}

}  // namespace gradmesh::comm::gloo_backend
