#include "gradmesh/kernels/embedding.h"

#include <cstring>

namespace gradmesh::kernels {

void embedding_gather(const float* table, int64_t dim, const int64_t* ids, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(out + i * dim, table + ids[i] * dim, static_cast<size_t>(dim) * sizeof(float));
}

void embedding_scatter_add(const float* dout, int64_t dim, const int64_t* ids, int64_t count, float* dtable) {
  for (int64_t i = 0; i < count; ++i) {
    float* __restrict dst = dtable + ids[i] * dim;
    const float* __restrict src = dout + i * dim;
    for (int64_t j = 0; j < dim; ++j) dst[j] += src[j];
  }
}

}  // namespace gradmesh::kernels
