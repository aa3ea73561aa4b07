// Aligned storage with a size-keyed free list.
//
// Training allocates the same activation shapes every step. Returning blocks
// to a free list keyed by their exact size means the steady state performs no
// malloc/free and, more importantly, no mmap/munmap page faults for the large
// blocks glibc would otherwise hand back to the kernel every step.
#pragma once

#include <cstddef>

namespace gradmesh {

inline constexpr size_t kTensorAlignment = 64;  // one cache line, also AVX-512 width

class Storage {
 public:
  explicit Storage(size_t bytes);
  // Memory another owner keeps alive (a PyTorch tensor's, through
  // Tensor::borrow): never cached or freed here.
  struct Borrowed {};
  Storage(void* data, size_t bytes, Borrowed);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_;
  size_t bytes_;
  bool owned_ = true;
};

// Bytes currently parked in the free list (for tests and memory reports).
size_t storage_cached_bytes();
// Parks at most `max_cached_bytes` in all, and no block larger than
// `max_block_bytes` (freed at once instead). Training keeps the defaults (its
// tensors repeat every step); a server lowers them, so that one huge request
// does not keep its tensors' memory for ever.
void set_storage_cache_limits(size_t max_cached_bytes, size_t max_block_bytes);
// Frees every parked block.
void storage_release_cache();

}  // namespace gradmesh
