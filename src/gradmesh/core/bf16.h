// bfloat16 storage: the top 16 bits of an IEEE float32, rounded to nearest even.
// Used to halve bytes on the wire and on disk; arithmetic always happens in float32.
#pragma once

#include <cstdint>
#include <cstring>

namespace gradmesh {

// Written without a branch, so that loops over it vectorise (kernels/gemm_bf16.cc).
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;  // keep NaN a NaN
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float bf16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace gradmesh
