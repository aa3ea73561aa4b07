// BlockCache (block_cache.h). One mutex guards the map and the recency list;
// fetches and copies run outside it. A read first claims, under the lock, the
// blocks nobody holds or fetches, fetches its claims, publishes them, and only
// then waits for blocks other threads claimed: since every thread keeps its
// own claims before it waits for anyone's, no two reads can wait for each other.
#include "gradmesh/data/block_cache.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

#include "gradmesh/core/error.h"

namespace gradmesh::data {

BlockCache::BlockCache(std::vector<int64_t> sizes, int64_t block_bytes, int64_t budget_bytes, Fetch fetch)
    : sizes_(std::move(sizes)), block_bytes_(block_bytes), budget_bytes_(budget_bytes), fetch_(std::move(fetch)) {
  GRADMESH_CHECK(block_bytes_ > 0, "a block cache needs blocks of at least one byte");
}

void BlockCache::read(size_t f, int64_t offset, void* out, int64_t bytes) {
  if (bytes <= 0) return;
  GRADMESH_CHECK(f < sizes_.size() && offset >= 0 && offset + bytes <= sizes_[f], "a read outside the file");
  const int64_t first = offset / block_bytes_, last = (offset + bytes - 1) / block_bytes_;
  std::vector<std::shared_future<Block>> blocks(static_cast<size_t>(last - first + 1));
  std::vector<Claim> claims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int64_t b = first; b <= last; ++b) {
      auto [it, inserted] = entries_.try_emplace(key(f, b));
      Entry& e = it->second;
      if (inserted) {
        claims.push_back({static_cast<size_t>(b - first), std::promise<Block>()});
        e.block = claims.back().promise.get_future().share();
      } else if (e.loaded) {
        lru_.splice(lru_.begin(), lru_, e.recency);
      }
      blocks[static_cast<size_t>(b - first)] = e.block;
    }
  }
  if (!claims.empty()) {
    std::vector<Block> fetched(claims.size());
    try {
      fetch_claims(f, first, claims, fetched);
    } catch (...) {
      forget(f, first, claims);
      for (Claim& c : claims) c.promise.set_exception(std::current_exception());
      throw;
    }
    keep(f, first, claims, fetched);
  }
  auto* p = static_cast<char*>(out);
  for (int64_t b = first; b <= last; ++b) {
    const Block block = blocks[static_cast<size_t>(b - first)].get();  // another thread's fetch error rethrows here
    const int64_t block_begin = b * block_bytes_;
    const int64_t from = std::max(offset, block_begin);
    const int64_t to = std::min(offset + bytes, block_begin + static_cast<int64_t>(block->size()));
    GRADMESH_CHECK(to >= from, "a block shorter than the read it serves");
    std::memcpy(p + (from - offset), block->data() + (from - block_begin), static_cast<size_t>(to - from));
  }
}

// Claims next to each other go in one fetch: a sample larger than a block
// costs one round trip, not one per block.
void BlockCache::fetch_claims(size_t f, int64_t first, std::vector<Claim>& claims, std::vector<Block>& fetched) {
  for (size_t i = 0; i < claims.size();) {
    size_t j = i;
    while (j + 1 < claims.size() && claims[j + 1].at == claims[j].at + 1) ++j;
    const int64_t begin = (first + static_cast<int64_t>(claims[i].at)) * block_bytes_;
    const int64_t end = std::min(sizes_[f], (first + static_cast<int64_t>(claims[j].at) + 1) * block_bytes_);
    std::string run(static_cast<size_t>(end - begin), '\0');
    fetch_(f, begin, end, run.data());
    if (i == j) {
      fetched[i] = std::make_shared<const std::string>(std::move(run));
    } else {
      for (size_t k = i; k <= j; ++k) {
        const size_t at = static_cast<size_t>(k - i) * static_cast<size_t>(block_bytes_);
        fetched[k] = std::make_shared<const std::string>(run.substr(at, static_cast<size_t>(block_bytes_)));
      }
    }
    i = j + 1;
  }
}

void BlockCache::keep(size_t f, int64_t first, std::vector<Claim>& claims, const std::vector<Block>& fetched) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < claims.size(); ++i) {
    const uint64_t k = key(f, first + static_cast<int64_t>(claims[i].at));
    Entry& e = entries_.at(k);  // only its claimer removes a block being fetched
    e.loaded = true;
    lru_.push_front(k);
    e.recency = lru_.begin();
    held_bytes_ += static_cast<int64_t>(fetched[i]->size());
    claims[i].promise.set_value(fetched[i]);
  }
  // The least recently used go first, possibly blocks this read just
  // fetched: its futures keep them alive until it has copied them.
  while (held_bytes_ > budget_bytes_ && !lru_.empty()) {
    const auto victim = entries_.find(lru_.back());
    held_bytes_ -= static_cast<int64_t>(victim->second.block.get()->size());
    entries_.erase(victim);
    lru_.pop_back();
  }
}

// A failed fetch leaves nothing behind: the next read of these blocks fetches them again.
void BlockCache::forget(size_t f, int64_t first, const std::vector<Claim>& claims) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Claim& c : claims) entries_.erase(key(f, first + static_cast<int64_t>(c.at)));
}

int64_t BlockCache::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

}  // namespace gradmesh::data
