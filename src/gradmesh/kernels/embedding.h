// Embedding lookup (gather rows of a table) and its gradient (scatter-add).
#pragma once

#include <cstdint>

namespace gradmesh::kernels {

// out[i, :] = table[ids[i], :].  REQUIRES: 0 <= ids[i] < rows (checked by the caller).
void embedding_gather(const float* table, int64_t dim, const int64_t* ids, int64_t count, float* out);
// dtable[ids[i], :] += dout[i, :]  (repeated ids accumulate, in index order: deterministic).
void embedding_scatter_add(const float* dout, int64_t dim, const int64_t* ids, int64_t count, float* dtable);

}  // namespace gradmesh::kernels
