// Where a sharded set's bytes come from: a local directory (pread on
// descriptors opened once) or an http:// or https:// base URL (range
// requests through a bounded block cache, data/http_shard_files.cc).
// MdsReader (mds.h) reads its files through this seam only, so the format's
// checks are the same wherever the bytes live.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gradmesh::data {

struct MdsReadOptions;

// The files of one set. After open(), read() and read_once() may be called
// from several threads at once.
class ShardFiles {
 public:
  virtual ~ShardFiles() = default;

  // Where `file` (a name relative to the set) is, for messages: a path or a URL.
  virtual std::string where(const std::string& file) const = 0;
  // A small file whole (index.json): none when it does not exist (no such
  // file, HTTP 404); Error(kIo) naming it when it cannot be read;
  // Error(kFormat) naming it when it is larger than `max_bytes`.
  virtual std::optional<std::string> read_whole(const std::string& file, int64_t max_bytes) const = 0;
  // Opens `files` (names relative to the set; `sizes` as the set's index
  // records them) and returns the first min(head_bytes, size) bytes of each.
  // Error(kIo) naming a file that cannot be opened or read; Error(kFormat)
  // naming one whose size differs from `sizes` (the message says "truncated
  // or replaced?"). REQUIRES: called once, before any read.
  virtual std::vector<std::string> open(const std::vector<std::string>& files, const std::vector<int64_t>& sizes,
                                        int64_t head_bytes) = 0;
  // Bytes [offset, offset + bytes) of file `f` (an index into open()'s list)
  // into `out`. Error(kIo) naming the file and the range when they cannot be
  // read. REQUIRES: the range lies inside the file's size.
  virtual void read(size_t f, int64_t offset, void* out, int64_t bytes) const = 0;
  // The same, past any cache: for reads done once (verifying a shard), which
  // would only evict what the loader's threads need.
  virtual void read_once(size_t f, int64_t offset, void* out, int64_t bytes) const = 0;
  // Bytes fetched from where the files live so far: read from disk, or
  // received over the network (reads served by the cache cost none).
  virtual int64_t bytes_fetched() const = 0;
};

// Whether `location` is an http:// or https:// URL rather than a directory.
bool is_http_location(const std::string& location);

// The files of the set at `location`: a directory, or an http(s) base URL
// read as `options` say. Error(kUsage) naming `location` for a URL of another
// scheme or one that carries credentials, a query or a fragment.
std::unique_ptr<ShardFiles> open_shard_files(const std::string& location, const MdsReadOptions& options);

// The HTTP implementation (http_shard_files.cc), kept out of this header so
// that only that file includes httplib.h.
std::unique_ptr<ShardFiles> open_http_shard_files(const std::string& base_url, const MdsReadOptions& options);

}  // namespace gradmesh::data
