// Test support for the safetensors tests: file images spelled out byte by byte.
#pragma once

#include <cstdint>
#include <string>

namespace gradmesh::checkpoint {

// The 8-byte little-endian length prefix of a safetensors file.
inline std::string le64(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out;
}

}  // namespace gradmesh::checkpoint
