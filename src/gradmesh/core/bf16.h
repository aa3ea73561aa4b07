// bfloat16 storage: the top 16 bits of an IEEE float32, rounded to nearest even.
// Used to halve bytes on the wire and on disk; arithmetic always happens in float32.
#pragma once

#include <cstdint>
#include <cstring>

namespace gradmesh {

inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // keep NaN a NaN
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float bf16_to_float(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace gradmesh
