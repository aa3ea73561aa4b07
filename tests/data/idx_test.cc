#include <gtest/gtest.h>

#include <filesystem>

#include "data/idx_files.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/rng.h"
#include "gradmesh/data/idx.h"

namespace gradmesh::data {
namespace {

using testing::Bytes;
using testing::expect_error;
using testing::idx_bytes;
using testing::ScratchDir;
using testing::write_file;
using testing::write_gz;

Bytes pattern_bytes(size_t n, uint64_t seed) {
  const CounterRng rng(seed, RngPurpose::kTest, 0);
  Bytes out(n);
  // Low entropy so gzip has real back-references to decode.
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(rng.below(i, 8) * 32);
  return out;
}

TEST(ReadIdx, PlainRoundTrip) {
  ScratchDir dir;
  const Bytes payload = pattern_bytes(5 * 3 * 4, 1);
  write_file(dir.file("a.idx"), idx_bytes(0x08, {5, 3, 4}, payload));
  const IdxArray a = read_idx(dir.file("a.idx"));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{5, 3, 4}));
  EXPECT_EQ(a.values, payload);
}

TEST(ReadIdx, GzipRoundTripForEveryRank) {
  ScratchDir dir;
  const std::vector<std::vector<uint32_t>> shapes = {{300}, {20, 30}, {10, 16, 16}, {7, 3, 8, 9}};
  for (const auto& shape : shapes) {
    size_t n = 1;
    for (uint32_t d : shape) n *= d;
    const Bytes payload = pattern_bytes(n, shape.size());
    write_gz(dir.file("a.gz"), idx_bytes(0x08, shape, payload));
    const IdxArray a = read_idx(dir.file("a.gz"));
    EXPECT_EQ(a.dims, std::vector<int64_t>(shape.begin(), shape.end()));
    EXPECT_EQ(a.values, payload);
  }
}

TEST(ReadIdx, DetectsGzipByContentNotByName) {
  ScratchDir dir;
  const Bytes payload = pattern_bytes(64, 2);
  write_gz(dir.file("compressed.idx"), idx_bytes(0x08, {64}, payload));
  write_file(dir.file("plain.gz"), idx_bytes(0x08, {64}, payload));
  EXPECT_EQ(read_idx(dir.file("compressed.idx")).values, payload);
  EXPECT_EQ(read_idx(dir.file("plain.gz")).values, payload);
}

TEST(ReadIdx, ReadsConcatenatedGzipMembers) {
  ScratchDir dir;
  const Bytes payload = pattern_bytes(1000, 3);
  const Bytes whole = idx_bytes(0x08, {10, 100}, payload);
  const Bytes first(whole.begin(), whole.begin() + 300), second(whole.begin() + 300, whole.end());
  write_gz(dir.file("p1.gz"), first);
  write_gz(dir.file("p2.gz"), second);
  Bytes joined = testing::read_file(dir.file("p1.gz"));
  const Bytes tail = testing::read_file(dir.file("p2.gz"));
  joined.insert(joined.end(), tail.begin(), tail.end());
  write_file(dir.file("joined.gz"), joined);
  EXPECT_EQ(read_idx(dir.file("joined.gz")).values, payload);
}

TEST(ReadIdx, RejectsBadMagic) {
  ScratchDir dir;
  Bytes bytes = idx_bytes(0x08, {4}, {1, 2, 3, 4});
  bytes[1] = 0x03;
  write_file(dir.file("bad"), bytes);
  expect_error([&] { read_idx(dir.file("bad")); }, ErrorKind::kFormat, dir.file("bad"), {"bad magic", "0x03"});
}

TEST(ReadIdx, RejectsUnsupportedTypeByName) {
  ScratchDir dir;
  write_file(dir.file("f"), idx_bytes(0x0D, {1}, {0, 0, 0, 0}));
  expect_error([&] { read_idx(dir.file("f")); }, ErrorKind::kFormat, dir.file("f"), {"0x0D", "float32", "0x08"});
  write_file(dir.file("g"), idx_bytes(0x42, {1}, {0}));
  expect_error([&] { read_idx(dir.file("g")); }, ErrorKind::kFormat, dir.file("g"), {"0x42"});
}

TEST(ReadIdx, RejectsNdimZeroAndFive) {
  ScratchDir dir;
  write_file(dir.file("n0"), idx_bytes(0x08, {}, {7}));
  expect_error([&] { read_idx(dir.file("n0")); }, ErrorKind::kFormat, dir.file("n0"), {"0 dimensions", "1 to 4"});
  write_file(dir.file("n5"), idx_bytes(0x08, {1, 1, 1, 1, 1}, {7}));
  expect_error([&] { read_idx(dir.file("n5")); }, ErrorKind::kFormat, dir.file("n5"), {"5 dimensions"});
}

TEST(ReadIdx, RejectsZeroDimension) {
  ScratchDir dir;
  write_file(dir.file("z"), idx_bytes(0x08, {3, 0, 2}, {}));
  expect_error([&] { read_idx(dir.file("z")); }, ErrorKind::kFormat, dir.file("z"), {"dimension 1 is 0"});
}

TEST(ReadIdx, RejectsSizesAboveTheLimitWithoutAllocating) {
  ScratchDir dir;
  write_file(dir.file("big"), idx_bytes(0x08, {65536, 65536}, {1, 2, 3}));
  expect_error([&] { read_idx(dir.file("big")); }, ErrorKind::kFormat, dir.file("big"), {"65536x65536", "2 GiB"});
  // Would overflow int64 if multiplied blindly.
  write_file(dir.file("huge"), idx_bytes(0x08, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}));
  expect_error([&] { read_idx(dir.file("huge")); }, ErrorKind::kFormat, dir.file("huge"), {"2 GiB"});
  // Exactly at the limit is allowed by the header check; the short payload is then reported.
  write_file(dir.file("edge"), idx_bytes(0x08, {2, 1024, 1024, 1024}, {1}));
  expect_error([&] { read_idx(dir.file("edge")); }, ErrorKind::kFormat, dir.file("edge"),
               {"truncated: header says 2x1024x1024x1024 = 2147483648 bytes of data, file has 1"});
}

TEST(ReadIdx, RejectsTruncatedHeader) {
  ScratchDir dir;
  write_file(dir.file("h2"), {0, 0});
  expect_error([&] { read_idx(dir.file("h2")); }, ErrorKind::kFormat, dir.file("h2"),
               {"truncated header", "file has 2"});
  const Bytes full = idx_bytes(0x08, {2, 2, 2}, {});
  write_file(dir.file("h9"), Bytes(full.begin(), full.begin() + 9));
  expect_error([&] { read_idx(dir.file("h9")); }, ErrorKind::kFormat, dir.file("h9"),
               {"truncated header: 3 dimensions need 16 header bytes, file has 9"});
  write_file(dir.file("empty"), {});
  expect_error([&] { read_idx(dir.file("empty")); }, ErrorKind::kFormat, dir.file("empty"), {"file has 0"});
}

TEST(ReadIdx, RejectsTruncatedPayloadWithCounts) {
  ScratchDir dir;
  write_file(dir.file("t"), idx_bytes(0x08, {3, 2, 2}, {1, 2, 3, 4, 5}));
  expect_error([&] { read_idx(dir.file("t")); }, ErrorKind::kFormat, dir.file("t"),
               {"truncated: header says 3x2x2 = 12 bytes of data, file has 5"});
  write_gz(dir.file("t.gz"), idx_bytes(0x08, {3, 2, 2}, {1, 2, 3, 4, 5}));
  expect_error([&] { read_idx(dir.file("t.gz")); }, ErrorKind::kFormat, dir.file("t.gz"),
               {"12 bytes of data, decompressed data has 5"});
}

TEST(ReadIdx, RejectsTrailingBytes) {
  ScratchDir dir;
  write_file(dir.file("x"), idx_bytes(0x08, {2}, {1, 2, 3, 4, 5}));
  expect_error([&] { read_idx(dir.file("x")); }, ErrorKind::kFormat, dir.file("x"),
               {"2 bytes of data", "3 more bytes"});
  write_gz(dir.file("x.gz"), idx_bytes(0x08, {2}, {1, 2, 3}));
  expect_error([&] { read_idx(dir.file("x.gz")); }, ErrorKind::kFormat, dir.file("x.gz"), {"1 more bytes"});
}

TEST(ReadIdx, RejectsCorruptGzip) {
  ScratchDir dir;
  write_gz(dir.file("ok.gz"), idx_bytes(0x08, {40, 50}, pattern_bytes(2000, 4)));
  const Bytes good = testing::read_file(dir.file("ok.gz"));
  ASSERT_GT(good.size(), 40u);

  Bytes flipped = good;
  flipped[good.size() / 2] ^= 0xFF;  // inside the deflate data
  write_file(dir.file("flip.gz"), flipped);
  expect_error([&] { read_idx(dir.file("flip.gz")); }, ErrorKind::kFormat, dir.file("flip.gz"), {"gzip"});

  Bytes bad_crc = good;
  bad_crc[good.size() - 6] ^= 0x01;  // CRC-32 in the trailer
  write_file(dir.file("crc.gz"), bad_crc);
  expect_error([&] { read_idx(dir.file("crc.gz")); }, ErrorKind::kFormat, dir.file("crc.gz"), {"corrupt gzip"});

  write_file(dir.file("cut.gz"), Bytes(good.begin(), good.end() - 4));
  expect_error([&] { read_idx(dir.file("cut.gz")); }, ErrorKind::kFormat, dir.file("cut.gz"), {"truncated download"});

  Bytes garbage = good;
  garbage.push_back('x');
  write_file(dir.file("tail.gz"), garbage);
  expect_error([&] { read_idx(dir.file("tail.gz")); }, ErrorKind::kFormat, dir.file("tail.gz"), {"non-gzip bytes"});
}

TEST(ReadIdx, MissingFileIsAnIoError) {
  ScratchDir dir;
  expect_error([&] { read_idx(dir.file("nope")); }, ErrorKind::kIo, dir.file("nope"), {"cannot open"});
  std::filesystem::create_directory(dir.file("subdir"));
  expect_error([&] { read_idx(dir.file("subdir")); }, ErrorKind::kIo, dir.file("subdir"));
}

// Every prefix of a valid file is malformed; each must be an Error, never a crash.
TEST(ReadIdx, EveryTruncationIsAnError) {
  ScratchDir dir;
  const Bytes plain = idx_bytes(0x08, {6, 5, 4}, pattern_bytes(120, 5));
  write_gz(dir.file("full.gz"), plain);
  const Bytes gz = testing::read_file(dir.file("full.gz"));
  for (const Bytes* full : {&plain, &gz}) {
    for (size_t len = 0; len < full->size(); ++len) {
      write_file(dir.file("cut"), Bytes(full->begin(), full->begin() + static_cast<std::ptrdiff_t>(len)));
      EXPECT_THROW(read_idx(dir.file("cut")), Error) << "prefix of " << len << " bytes";
    }
    write_file(dir.file("cut"), *full);
    EXPECT_EQ(read_idx(dir.file("cut")).values.size(), 120u);
  }
}

// Random byte corruption of a gzip file: either it still decodes or it is an Error.
TEST(ReadIdx, CorruptedBytesNeverCrash) {
  ScratchDir dir;
  const Bytes plain = idx_bytes(0x08, {10, 10}, pattern_bytes(100, 6));
  write_gz(dir.file("full.gz"), plain);
  const Bytes gz = testing::read_file(dir.file("full.gz"));
  const CounterRng rng(9, RngPurpose::kTest, 1);
  int errors = 0;
  for (uint64_t trial = 0; trial < 100; ++trial) {
    for (const Bytes* full : {&plain, &gz}) {
      Bytes bad = *full;
      bad[rng.below(2 * trial + (full == &gz), bad.size())] ^= static_cast<uint8_t>(1 + rng.below(1000 + trial, 255));
      write_file(dir.file("bad"), bad);
      try {
        read_idx(dir.file("bad"));
      } catch (const Error&) {
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 60);  // most corruptions are detected
}

}  // namespace
}  // namespace gradmesh::data
