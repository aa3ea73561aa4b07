#include "gradmesh/parallel/released_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <utility>

namespace gradmesh::parallel {
namespace {

uintptr_t page_bytes() {
  static const uintptr_t bytes = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return bytes;
}

// [first, last): the whole pages inside [begin, end), given back.
std::pair<std::byte*, std::byte*> give_back(std::byte* begin, std::byte* end) {
  const uintptr_t page = page_bytes();
  auto* first = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page);
  auto* last = reinterpret_cast<std::byte*>(reinterpret_cast<uintptr_t>(end) / page * page);
  if (first >= last) return {end, end};
  if (::madvise(first, static_cast<size_t>(last - first), MADV_DONTNEED) != 0)
    std::memset(first, 0, static_cast<size_t>(last - first));  // still zeros, just not given back
  return {first, last};
}

}  // namespace

void zero_and_give_back(float* x, int64_t n) {
  if (n <= 0) return;
  auto* begin = reinterpret_cast<std::byte*>(x);
  auto* end = reinterpret_cast<std::byte*>(x + n);
  const auto [first, last] = give_back(begin, end);
  std::memset(begin, 0, static_cast<size_t>(first - begin));
  if (last < end) std::memset(last, 0, static_cast<size_t>(end - last));
}

void give_back_whole_pages(void* begin, void* end) {
  give_back(static_cast<std::byte*>(begin), static_cast<std::byte*>(end));
}

}  // namespace gradmesh::parallel
