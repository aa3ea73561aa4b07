// Helpers shared by the data-layer tests: a scratch directory and writers
// for plain and gzip IDX files.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "gradmesh/core/error.h"
#include "support/temp_dir.h"

namespace gradmesh::data::testing {

using Bytes = std::vector<uint8_t>;

using ScratchDir = gradmesh::testing::TempDir;

// Header (type, dims) followed by `payload`, exactly as given.
inline Bytes idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    out.push_back(static_cast<uint8_t>(d >> 24));
    out.push_back(static_cast<uint8_t>(d >> 16));
    out.push_back(static_cast<uint8_t>(d >> 8));
    out.push_back(static_cast<uint8_t>(d));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

inline void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline Bytes read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Writes `bytes` gzip-compressed through zlib's gz* API (what gzip(1) makes).
inline void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb9");
  ASSERT_NE(gz, nullptr) << "gzopen failed for " << path;
  if (!bytes.empty()) {
    EXPECT_EQ(gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  }
  EXPECT_EQ(gzclose(gz), Z_OK);
}

// Runs `fn`, expects a gradmesh::Error of `kind` whose message starts with
// `path` and contains every string in `needles`.
inline void expect_error(const std::function<void()>& fn, ErrorKind kind, const std::string& path,
                         const std::vector<std::string>& needles = {}) {
  try {
    fn();
    ADD_FAILURE() << "expected an error for " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), kind) << msg;
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not start with the path: " << msg;
    for (const std::string& needle : needles) {
      EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
    }
  }
}

}  // namespace gradmesh::data::testing
