#include "gradmesh/core/storage.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "gradmesh/core/env.h"

namespace gradmesh {
namespace {

// Above this many parked bytes, released blocks go straight back to the OS:
// the cache must never turn a changing workload into unbounded memory.
constexpr size_t kMaxCachedBytes = size_t{2} << 30;

struct FreeList {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> blocks;
  size_t cached_bytes = 0;
  size_t max_cached_bytes = kMaxCachedBytes;
  size_t max_block_bytes = kMaxCachedBytes;
  bool enabled = env_flag("GRADMESH_ALLOC_CACHE", true);
};

FreeList& free_list() {
  static FreeList* list = new FreeList();  // never destroyed: tensors may outlive static teardown
  return *list;
}

size_t round_up(size_t bytes) {
  const size_t b = bytes == 0 ? kTensorAlignment : bytes;
  return (b + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

}  // namespace

Storage::Storage(size_t bytes) : data_(nullptr), bytes_(round_up(bytes)) {
  FreeList& list = free_list();
  if (list.enabled) {
    std::lock_guard<std::mutex> lock(list.mutex);
    auto it = list.blocks.find(bytes_);
    if (it != list.blocks.end() && !it->second.empty()) {
      data_ = it->second.back();
      it->second.pop_back();
      list.cached_bytes -= bytes_;
      return;
    }
  }
  data_ = std::aligned_alloc(kTensorAlignment, bytes_);
  if (data_ == nullptr) throw std::bad_alloc();
}

Storage::Storage(void* data, size_t bytes, Borrowed) : data_(data), bytes_(bytes), owned_(false) {}

Storage::~Storage() {
  if (!owned_) return;
  FreeList& list = free_list();
  if (list.enabled) {
    std::lock_guard<std::mutex> lock(list.mutex);
    if (bytes_ <= list.max_block_bytes && list.cached_bytes + bytes_ <= list.max_cached_bytes) {
      list.blocks[bytes_].push_back(data_);
      list.cached_bytes += bytes_;
      return;
    }
  }
  std::free(data_);
}

size_t storage_cached_bytes() {
  FreeList& list = free_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  return list.cached_bytes;
}

void set_storage_cache_limits(size_t max_cached_bytes, size_t max_block_bytes) {
  FreeList& list = free_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  list.max_cached_bytes = std::min(max_cached_bytes, kMaxCachedBytes);
  list.max_block_bytes = max_block_bytes;
}

void storage_release_cache() {
  FreeList& list = free_list();
  std::lock_guard<std::mutex> lock(list.mutex);
  for (auto& [bytes, blocks] : list.blocks)
    for (void* block : blocks) std::free(block);
  list.blocks.clear();
  list.cached_bytes = 0;
}

}  // namespace gradmesh
