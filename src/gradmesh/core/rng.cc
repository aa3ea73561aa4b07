#include "gradmesh/core/rng.h"

#include <cmath>

namespace gradmesh {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

__extension__ using Uint128 = unsigned __int128;

}  // namespace

PhiloxBlock philox4x32(PhiloxBlock c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c[0], hi0, lo0);
    mulhilo(kMul1, c[2], hi1, lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

CounterRng::CounterRng(uint64_t seed, RngPurpose purpose, uint64_t step)
    : key_{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)},
      step_lo_(static_cast<uint32_t>(step)),
      purpose_step_hi_((static_cast<uint32_t>(purpose) << 24) ^ static_cast<uint32_t>(step >> 32)) {}

PhiloxBlock CounterRng::block(uint64_t index) const {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), step_lo_, purpose_step_hi_},
                    key_);
}

uint32_t CounterRng::bits(uint64_t index) const { return block(index >> 2)[index & 3]; }

float CounterRng::uniform(uint64_t index) const { return static_cast<float>(bits(index) >> 8) * (1.0f / 16777216.0f); }

float CounterRng::normal(uint64_t index) const {
  const PhiloxBlock b = block(index);
  // u1 in (0, 1] so the log is finite.
  const double u1 = (static_cast<double>(b[0]) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(b[1]) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

uint64_t CounterRng::below(uint64_t index, uint64_t n) const {
  const PhiloxBlock b = block(index);
  const uint64_t word = (static_cast<uint64_t>(b[0]) << 32) | b[1];
  return static_cast<uint64_t>((static_cast<Uint128>(word) * n) >> 64);
}

}  // namespace gradmesh
