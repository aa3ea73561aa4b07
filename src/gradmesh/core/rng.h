// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A draw is a pure function of (seed, purpose, step, index): no generator
// state advances, so the value at a given index is the same whichever thread
// computes it, in whatever order, on however many ranks. Initialising weight
// element i, shuffling epoch e, or masking activation j at step s each asks
// for its own counter, which is what makes training bit-reproducible.
#pragma once

#include <array>
#include <cstdint>

namespace gradmesh {

// Distinct purposes never share a stream even with equal step and index.
enum class RngPurpose : uint32_t {
  kInit = 1,     // parameter initialisation; step = parameter index
  kShuffle = 2,  // per-epoch sample order; step = epoch
  kDropout = 3,  // dropout masks; step = (global step, layer)
  kTest = 4,     // random inputs in tests and benchmarks
  kWindow = 5,   // where language-model training windows start; step = epoch, index = sample
  kSampling = 6, // next-token sampling in generation; step = seed stream, index = position
  kPowerSgd = 7, // PowerSGD's initial Q; step = matrix index, index = element
  kShardShuffle = 8,  // shard-aware sample order; step = epoch, index = (block, round, value) or a shard draw
  kAugment = 9,  // data augmentation (crop offsets, flips); step = epoch, index = sample
};

using PhiloxBlock = std::array<uint32_t, 4>;

// The raw bijection: 10 rounds of Philox4x32 on `counter` under `key`.
PhiloxBlock philox4x32(PhiloxBlock counter, std::array<uint32_t, 2> key);

class CounterRng {
 public:
  CounterRng(uint64_t seed, RngPurpose purpose, uint64_t step);

  // Four independent 32-bit words for block `index`.
  PhiloxBlock block(uint64_t index) const;
  // 32 random bits for element `index` (four elements share one block).
  uint32_t bits(uint64_t index) const;
  // Uniform in [0, 1) with 24 bits of precision.
  float uniform(uint64_t index) const;
  // Standard normal (Box-Muller on the words of block `index`).
  float normal(uint64_t index) const;
  // Uniform integer in [0, n), n >= 1 (64-bit multiply-shift; bias < n / 2^64).
  uint64_t below(uint64_t index, uint64_t n) const;

 private:
  std::array<uint32_t, 2> key_;
  uint32_t step_lo_;
  uint32_t purpose_step_hi_;
};

}  // namespace gradmesh
