// Giving memory back to the OS inside a live buffer (ZeRO stages 2 and 3).
#pragma once

#include <cstdint>

namespace gradmesh::parallel {

// Zeroes x[0, n), returning its whole pages to the OS (madvise
// MADV_DONTNEED) instead of writing them: Tensor storage is private
// anonymous memory, so those pages read back as zeros and are faulted in
// again, zero-filled, by the next write. Bytes on pages x shares with its
// neighbours are zeroed by hand and the pages kept.
void zero_and_give_back(float* x, int64_t n);

// Returns the whole pages inside [begin, end) without zeroing the bytes of
// partly covered pages (scratch whose content no longer matters).
void give_back_whole_pages(void* begin, void* end);

}  // namespace gradmesh::parallel
