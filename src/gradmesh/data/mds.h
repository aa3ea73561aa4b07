// Sharded data sets in MosaicML Streaming's MDS format (version 2), written
// and read here without Python, in the layout Streaming's MDSWriter writes,
// so a set gradmesh prepares is meant to be one
// `streaming.StreamingDataset(local=DIR)` reads too, and the other way round
// for the encodings below (docs/data.md says why MDS).
//
// A set is a directory, or the same files under an http:// or https:// base
// URL (read with range requests through a bounded cache, MdsReadOptions):
// index.json lists the shards, each shard file is
//
//   uint32 n                        samples in the shard (little endian)
//   uint32 offsets[n + 1]           byte offset of each sample in the file; offsets[n] = file size
//   sample 0, sample 1, ...         each: a uint32 size per variable-size column, then the columns' bytes
//
// so any sample is two small preads away, with nothing read but its own
// bytes: ranks that each train on a slice of the global order read only
// their part, and ranks on one machine share the page cache. index.json
// carries per shard its sample count, byte size and xxh64 checksum
// (raw_data.hashes.xxh64, as Streaming names it); the checksum is verified
// when a set is prepared and by verify_shard() (gradmesh inspect, or
// data.verify_shards before training), since verifying on every read would
// read every shard on every rank.
//
// Encodings handled: "int" (int64), "uint8" ... "int64", "float32", "bytes",
// "str", "jpeg", "png" (stored as their files' bytes), and fixed-shape
// "ndarray:<dtype>:<d0,d1,...>" (raw little-endian elements). Compressed
// shards (zip_data) are refused with a message saying so.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gradmesh::data {

// A sample larger than this is a corrupt offset, not data (a 4K RGB image is 50 MB).
inline constexpr int64_t kMdsMaxSampleBytes = int64_t{256} << 20;

struct MdsColumn {
  std::string name;
  std::string encoding;              // as in index.json, e.g. "int", "jpeg", "ndarray:uint8:1,28,28"
  std::optional<int64_t> size;       // bytes of a fixed-size encoding, none when variable
};

// A shard's xxh64 as index.json records it: 16 lowercase hex digits.
std::string mds_xxh64_hex(uint64_t hash);

// The byte size of a fixed-size encoding; none for a variable one. Error(kFormat) naming `encoding` when unknown.
std::optional<int64_t> mds_fixed_size(const std::string& encoding);

// Writes a set: samples are appended in order, a shard is closed when the
// next sample would take it past `shard_bytes`, and finish() writes
// index.json last (a directory without it is no set, so an interrupted
// prepare is never mistaken for a finished one).
class MdsWriter {
 public:
  // Error(kIo) naming `dir` when it cannot be created; Error(kUsage) when
  // `columns` is empty or names an unknown encoding.
  MdsWriter(std::string dir, std::vector<MdsColumn> columns, int64_t shard_bytes);
  ~MdsWriter();
  MdsWriter(const MdsWriter&) = delete;
  MdsWriter& operator=(const MdsWriter&) = delete;

  // One sample: one value per column, each exactly its fixed size where it has one.
  void add(const std::vector<std::string_view>& values);
  // Closes the last shard and writes index.json. Returns the samples written.
  int64_t finish();
  int64_t samples() const { return total_; }

  // Resuming an interrupted writer: after each shard is written,
  // on_shard_closed(samples in closed shards) runs, and closed_index() is the
  // "shards" array of those shards (JSON text) to record. resume() takes such
  // a record before any add(): the shards it lists must be there with their
  // recorded sizes and checksums and this writer's columns (Error(kFormat)
  // naming the shard otherwise); the next shard follows them.
  std::function<void(int64_t)> on_shard_closed;
  std::string closed_index() const;
  void resume(const std::string& closed_index);

 private:
  void close_shard();

  std::string dir_;
  std::vector<MdsColumn> columns_;
  int64_t shard_bytes_;
  std::vector<std::string> samples_;   // the open shard's encoded samples
  int64_t open_bytes_ = 0;             // their bytes
  int64_t total_ = 0;
  std::vector<std::string> shard_entries_;  // index.json entries of the closed shards (JSON text)
  bool finished_ = false;
};

class ShardFiles;  // data/shard_files.h

struct MdsShardInfo {
  std::string file;        // relative to the set's directory
  int64_t samples = 0;
  int64_t bytes = 0;
  std::string xxh64;       // hex; empty when index.json has none
};

// How a set at a URL is read; a local directory ignores these.
struct MdsReadOptions {
  // Reads are served from blocks of `cache_block_bytes` (aligned ranges of a
  // shard), kept least recently used first out while they fit in
  // `cache_bytes`; a read inside a cached block costs no request. Below one
  // block, nothing is cached: every read is one request for its exact bytes.
  int64_t cache_bytes = int64_t{256} << 20;
  int64_t cache_block_bytes = int64_t{1} << 20;
  // Each of connecting, sending and waiting for the reply.
  std::chrono::milliseconds timeout{30000};
  // Further tries after a failed connection, a cut or timed-out transfer or a
  // 5xx reply, waiting retry_backoff, then twice that, ... in between. Other
  // replies (404, 200 instead of 206, a wrong range) are not tried again.
  int retries = 3;
  std::chrono::milliseconds retry_backoff{250};
};

// A set opened for reading. Thread-safe: sample() may be called from the
// loader's threads at once (pread on descriptors opened once; over HTTP, a
// pool of connections and a shared block cache).
class MdsReader {
 public:
  // `location` is the set's directory or its base URL
  // (http://host:port/path/to/set, where GET path/to/set/index.json answers).
  // Reads and checks index.json (Error(kFormat) naming it and the field) and
  // that every shard exists with its recorded size (Error(kFormat) naming the
  // shard's path or URL). Over HTTP this reads the first 4 bytes of every
  // shard (one small request each, a few at a time); an unreachable server,
  // an HTTP error or a server that ignores Range is Error(kIo) naming the URL.
  explicit MdsReader(const std::string& location, const MdsReadOptions& options = MdsReadOptions());
  ~MdsReader();
  MdsReader(const MdsReader&) = delete;
  MdsReader& operator=(const MdsReader&) = delete;

  // The directory or base URL the set was opened from.
  const std::string& dir() const { return dir_; }
  const std::vector<MdsColumn>& columns() const { return columns_; }
  const std::vector<MdsShardInfo>& shards() const { return shards_; }
  int64_t count() const { return total_; }
  // The column named `name`, or Error(kFormat) naming the set and the columns it has.
  size_t column(const std::string& name) const;
  // The shard holding global sample `index`, and the first global index of shard `s`.
  size_t shard_of(int64_t index) const;
  int64_t first_of(size_t shard) const { return starts_[shard]; }

  // Sample `index`'s columns, each its bytes. Error(kFormat) naming the shard
  // and the sample when its offsets or sizes are impossible.
  std::vector<std::string> sample(int64_t index) const;
  // The same into `buffer`, reused from call to call (no allocation once it
  // is large enough), with `columns` viewing the columns' bytes in it.
  void read(int64_t index, std::string& buffer, std::vector<std::string_view>& columns) const;
  // Bytes read from shard files so far (for metering): from disk, or
  // received over the network; reads served by the cache count nothing.
  int64_t bytes_read() const;
  // Reads shard `s` whole (over HTTP in range requests that bypass the
  // cache) and compares its xxh64 with index.json: "" when it matches, else
  // what is wrong (the checksum found and the one recorded).
  std::string verify_shard(size_t s) const;

 private:
  void read_exact(size_t shard, int64_t offset, void* out, int64_t bytes, int64_t index) const;

  std::string dir_;
  std::vector<MdsColumn> columns_;
  std::vector<MdsShardInfo> shards_;
  std::vector<int64_t> starts_;  // first global index of each shard, then the total
  std::unique_ptr<ShardFiles> files_;
  int64_t total_ = 0;
};

}  // namespace gradmesh::data
