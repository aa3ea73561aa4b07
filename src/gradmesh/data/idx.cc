#include "gradmesh/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "gradmesh/core/error.h"
#include "gradmesh/core/resource_usage.h"

namespace gradmesh::data {
namespace {

constexpr size_t kInputChunk = size_t{1} << 16;
// The payload buffer grows by at most this much ahead of the data actually
// read, so a header that lies about its size cannot force a 2 GiB allocation.
constexpr int64_t kGrowChunk = int64_t{64} << 20;
// Trailing garbage is counted only up to here: enough for a useful message,
// bounded for a gzip stream that would inflate to gigabytes.
constexpr int64_t kTrailingCountCap = int64_t{1} << 20;

std::string hex_byte(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned>(b));
  return buf;
}

// Sequential bytes from a file, transparently inflating gzip input. read()
// returns fewer bytes than asked only at the end of the (decompressed) data;
// every failure throws an Error that names the path.
class ByteReader {
 public:
  explicit ByteReader(const std::string& path) : path_(path), in_buf_(kInputChunk) {
    file_ = std::fopen(path.c_str(), "rb");
    if (file_ == nullptr)
      throw_error(ErrorKind::kIo, path, std::string("cannot open: ") + std::strerror(errno));
    in_len_ = fill(in_buf_.data(), in_buf_.size());
    gzip_ = in_len_ >= 2 && in_buf_[0] == 0x1f && in_buf_[1] == 0x8b;
    if (gzip_) {
      std::memset(&zs_, 0, sizeof zs_);
      // 16 + MAX_WBITS: gzip wrapper only, with its CRC-32 and length checked.
      if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) {
        std::fclose(file_);
        throw_error(ErrorKind::kIo, path, "cannot initialise zlib (out of memory?)");
      }
      zs_.next_in = in_buf_.data();
      zs_.avail_in = static_cast<uInt>(in_len_);
    }
  }
  ~ByteReader() {
    if (gzip_) inflateEnd(&zs_);
    std::fclose(file_);
  }
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  // "file has" or "decompressed data has": how byte counts are described.
  const char* holder() const { return gzip_ ? "decompressed data has" : "file has"; }

  size_t read(uint8_t* dst, size_t n) { return gzip_ ? read_gzip(dst, n) : read_plain(dst, n); }

  // Counts the bytes left, stopping at `cap`.
  int64_t count_rest(int64_t cap) {
    uint8_t scratch[4096];
    int64_t total = 0;
    while (total < cap) {
      const size_t got = read(scratch, sizeof scratch);
      total += static_cast<int64_t>(got);
      if (got < sizeof scratch) break;
    }
    return std::min(total, cap);
  }

 private:
  // fread until `n` bytes or end of file; kIo on a read error (EISDIR, EIO).
  size_t fill(uint8_t* dst, size_t n) {
    const size_t got = std::fread(dst, 1, n, file_);
    count_io(IoCounter::kDatasetRead, got);
    if (got < n && std::ferror(file_))
      throw_error(ErrorKind::kIo, path_, std::string("read failed: ") + std::strerror(errno));
    return got;
  }

  size_t read_plain(uint8_t* dst, size_t n) {
    const size_t buffered = std::min(n, in_len_ - in_pos_);
    std::memcpy(dst, in_buf_.data() + in_pos_, buffered);
    in_pos_ += buffered;
    return buffered == n ? n : buffered + fill(dst + buffered, n - buffered);
  }

  size_t read_gzip(uint8_t* dst, size_t n) {
    zs_.next_out = dst;
    zs_.avail_out = static_cast<uInt>(n);
    while (zs_.avail_out > 0) {
      if (zs_.avail_in == 0 && !eof_) {
        in_len_ = fill(in_buf_.data(), in_buf_.size());
        eof_ = in_len_ == 0;
        zs_.next_in = in_buf_.data();
        zs_.avail_in = static_cast<uInt>(in_len_);
      }
      if (member_ended_) {
        if (zs_.avail_in == 0) break;  // clean end of the last member
        // Concatenated members are valid gzip; anything else is garbage.
        if (zs_.next_in[0] != 0x1f)
          throw_error(ErrorKind::kFormat, path_,
                      "corrupt gzip file: non-gzip bytes after the end of the compressed stream");
        inflateReset(&zs_);
        member_ended_ = false;
      }
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
      } else if (rc == Z_BUF_ERROR) {
        // No progress possible: only happens once the input is exhausted.
        if (eof_)
          throw_error(ErrorKind::kFormat, path_,
                      "corrupt gzip file: it ends before the compressed stream does (truncated download?)");
      } else if (rc == Z_MEM_ERROR) {
        throw_error(ErrorKind::kIo, path_, "out of memory while decompressing");
      } else if (rc != Z_OK) {
        throw_error(ErrorKind::kFormat, path_,
                    std::string("corrupt gzip stream: ") + (zs_.msg ? zs_.msg : "zlib error " + std::to_string(rc)));
      }
    }
    return n - zs_.avail_out;
  }

  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<uint8_t> in_buf_;
  size_t in_len_ = 0;
  size_t in_pos_ = 0;  // plain mode: next unread byte of in_buf_
  bool gzip_ = false;
  bool member_ended_ = false;
  bool eof_ = false;  // gzip mode: fread has returned 0
  z_stream zs_;
};

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

const char* type_name(uint8_t code) {
  switch (code) {
    case 0x09: return " (signed byte)";
    case 0x0B: return " (int16)";
    case 0x0C: return " (int32)";
    case 0x0D: return " (float32)";
    case 0x0E: return " (float64)";
    default: return " (not an IDX type code)";
  }
}

void check_magic(const std::string& path, const uint8_t* magic) {
  if (magic[0] != 0 || magic[1] != 0)
    throw_error(ErrorKind::kFormat, path,
                "bad magic: an IDX file starts with two zero bytes, found " + hex_byte(magic[0]) + " " +
                    hex_byte(magic[1]) + "; is this an IDX file (e.g. train-images-idx3-ubyte)?");
  if (magic[2] != 0x08)
    throw_error(ErrorKind::kFormat, path,
                "unsupported element type " + hex_byte(magic[2]) + type_name(magic[2]) +
                    "; only 0x08 (unsigned byte) is supported");
  if (magic[3] < 1 || magic[3] > 4)
    throw_error(ErrorKind::kFormat, path,
                "header says " + std::to_string(magic[3]) + " dimensions; expected 1 to 4");
}

// Parses the dimensions and returns the payload size, validated <= 2 GiB.
int64_t parse_dims(const std::string& path, const uint8_t* raw, int ndim, std::vector<int64_t>& dims) {
  int64_t total = 1;
  bool too_large = false;
  for (int i = 0; i < ndim; ++i) {
    const int64_t d = load_be32(raw + 4 * i);
    dims.push_back(d);
    if (d == 0)
      throw_error(ErrorKind::kFormat, path,
                  "dimension " + std::to_string(i) + " is 0 (header says " + idx_dims_str(dims) +
                      "...); an empty array holds no samples");
    // Checked before multiplying: four uint32 dimensions can overflow int64.
    if (too_large || total > kIdxMaxPayloadBytes / d) too_large = true;
    else total *= d;
  }
  if (too_large)
    throw_error(ErrorKind::kFormat, path,
                "header says " + idx_dims_str(dims) + ", more than 2 GiB of data (this reader's limit); "
                "the header is probably corrupt");
  return total;
}

}  // namespace

std::string idx_dims_str(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

IdxArray read_idx(const std::string& path) {
  ByteReader in(path);
  uint8_t magic[4];
  const size_t magic_got = in.read(magic, sizeof magic);
  if (magic_got < sizeof magic)
    throw_error(ErrorKind::kFormat, path,
                "truncated header: an IDX file starts with 4 magic bytes, " + std::string(in.holder()) + " " +
                    std::to_string(magic_got));
  check_magic(path, magic);

  const int ndim = magic[3];
  uint8_t raw_dims[16];
  const size_t dims_bytes = 4 * static_cast<size_t>(ndim);
  const size_t dims_got = in.read(raw_dims, dims_bytes);
  if (dims_got < dims_bytes)
    throw_error(ErrorKind::kFormat, path,
                "truncated header: " + std::to_string(ndim) + " dimensions need " + std::to_string(4 + dims_bytes) +
                    " header bytes, " + in.holder() + " " + std::to_string(4 + dims_got));
  IdxArray out;
  const int64_t total = parse_dims(path, raw_dims, ndim, out.dims);

  out.values.reserve(static_cast<size_t>(std::min(total, kGrowChunk)));
  int64_t got = 0;
  while (got < total) {
    const int64_t chunk = std::min(total - got, kGrowChunk);
    out.values.resize(static_cast<size_t>(got + chunk));
    const size_t n = in.read(out.values.data() + got, static_cast<size_t>(chunk));
    got += static_cast<int64_t>(n);
    if (static_cast<int64_t>(n) < chunk) break;
  }
  if (got < total)
    throw_error(ErrorKind::kFormat, path,
                "truncated: header says " + idx_dims_str(out.dims) + " = " + std::to_string(total) +
                    " bytes of data, " + in.holder() + " " + std::to_string(got) +
                    "; the file is incomplete (interrupted download or copy?)");
  const int64_t trailing = in.count_rest(kTrailingCountCap);
  if (trailing > 0)
    throw_error(ErrorKind::kFormat, path,
                "header says " + idx_dims_str(out.dims) + " = " + std::to_string(total) + " bytes of data, but " +
                    in.holder() + (trailing >= kTrailingCountCap ? " at least " : " ") + std::to_string(trailing) +
                    " more bytes after them; is the header for a different file?");
  return out;
}

}  // namespace gradmesh::data
