// A bounded cache of fixed-size blocks of a set of files, for storage where
// every fetch is a round trip (a set read over HTTP, shard_files.h).
//
// A file is cut into aligned blocks of `block_bytes` (the last one short); a
// read is served from the blocks it touches. Blocks are kept least recently
// used first out while their bytes fit in `budget_bytes`, so memory stays
// under the budget whatever the files' size (plus, transiently, the blocks
// the reading threads are copying from). A read's missing blocks that lie
// next to each other are fetched with one call, and a block that one thread
// is fetching is waited for by the others rather than fetched again.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace gradmesh::data {

class BlockCache {
 public:
  // Bytes [begin, end) of file `f` into `out`, or a throw naming the file.
  // Called from the reading threads, without the cache's lock held.
  using Fetch = std::function<void(size_t f, int64_t begin, int64_t end, char* out)>;

  // `sizes`: each file's bytes. REQUIRES: block_bytes > 0.
  BlockCache(std::vector<int64_t> sizes, int64_t block_bytes, int64_t budget_bytes, Fetch fetch);
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // Bytes [offset, offset + bytes) of file `f` into `out`. Thread-safe. What
  // a fetch throws reaches every thread waiting for the blocks it fetched,
  // and those blocks are fetched again by the next read.
  // REQUIRES: the range lies inside the file.
  void read(size_t f, int64_t offset, void* out, int64_t bytes);

  // Bytes of the blocks kept now (never above the budget).
  int64_t held_bytes() const;
  int64_t block_bytes() const { return block_bytes_; }

 private:
  using Block = std::shared_ptr<const std::string>;
  struct Entry {
    std::shared_future<Block> block;
    bool loaded = false;                     // false while a thread fetches it
    std::list<uint64_t>::iterator recency;   // its place in lru_, when loaded
  };
  struct Claim {  // a block this read fetches
    size_t at;    // index among the read's blocks
    std::promise<Block> promise;
  };

  uint64_t key(size_t f, int64_t block) const { return static_cast<uint64_t>(f) << 32 | static_cast<uint64_t>(block); }
  void fetch_claims(size_t f, int64_t first, std::vector<Claim>& claims, std::vector<Block>& fetched);
  void keep(size_t f, int64_t first, std::vector<Claim>& claims, const std::vector<Block>& fetched);
  void forget(size_t f, int64_t first, const std::vector<Claim>& claims);

  std::vector<int64_t> sizes_;
  int64_t block_bytes_;
  int64_t budget_bytes_;
  Fetch fetch_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> entries_;  // by key(file, block): loaded or being fetched
  std::list<uint64_t> lru_;                      // loaded blocks, most recently used first
  int64_t held_bytes_ = 0;                       // their bytes
};

}  // namespace gradmesh::data
