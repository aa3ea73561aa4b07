// Reader for the IDX format (LeCun's MNIST container), plain or gzip.
//
// Layout: two zero bytes, an element-type byte, a dimension-count byte, then
// one big-endian uint32 per dimension, then the elements in row-major order.
// Only unsigned bytes (type 0x08) are supported: that is what every MNIST-like
// image and label file uses, and it keeps the payload a plain byte copy.
//
// Compression is detected from the first two bytes (1f 8b), never from the
// file name, so a renamed or decompressed file still loads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradmesh::data {

// The largest payload read_idx accepts. Far above any image data set that fits
// this engine's in-memory loader, far below what a corrupt header can claim.
inline constexpr int64_t kIdxMaxPayloadBytes = int64_t{1} << 31;  // 2 GiB

struct IdxArray {
  std::vector<int64_t> dims;    // 1..4 entries, each >= 1
  std::vector<uint8_t> values;  // product(dims) bytes, row-major
};

// Reads the whole file at `path`.
//
// Throws gradmesh::Error whose message starts with `path`:
//   kIo     the file cannot be opened or read;
//   kFormat bad magic, element type other than 0x08 (named in the message),
//           ndim outside 1..4, a zero dimension (an empty array carries no
//           samples and is always a mistake for a data set), a payload above
//           kIdxMaxPayloadBytes, truncated header or payload (expected and
//           found byte counts), trailing bytes after the payload, or a
//           corrupt/truncated gzip stream.
// Never crashes on malformed input, and the payload buffer grows with the
// data actually read, so a lying header cannot force a huge allocation.
IdxArray read_idx(const std::string& path);

// "60000x28x28": how IDX dimensions appear in messages.
std::string idx_dims_str(const std::vector<int64_t>& dims);

}  // namespace gradmesh::data
