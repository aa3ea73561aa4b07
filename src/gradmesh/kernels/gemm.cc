#include "gradmesh/kernels/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "gradmesh/core/env.h"
#include "gradmesh/core/error.h"
#include "gradmesh/core/parse_number.h"
#include "gradmesh/core/thread_pool.h"
#include "gradmesh/kernels/gemm_bf16.h"

namespace gradmesh::kernels {

namespace {
std::atomic<uint64_t> g_flops{0};
std::atomic<MatmulPrecision> g_precision{MatmulPrecision::kFp32};
std::atomic<bool> g_fast_small_batches{false};
}  // namespace

void set_fast_small_batches(bool on) { g_fast_small_batches.store(on); }
bool fast_small_batches() { return g_fast_small_batches.load(std::memory_order_relaxed); }

uint64_t gemm_flops() { return g_flops.load(std::memory_order_relaxed); }

void set_matmul_precision(MatmulPrecision precision) { g_precision.store(precision); }
MatmulPrecision matmul_precision() { return g_precision.load(); }

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  g_flops.fetch_add(static_cast<uint64_t>(2 * m * n * k), std::memory_order_relaxed);
  if (g_precision.load(std::memory_order_relaxed) == MatmulPrecision::kBf16) {
    gemm_f32_in_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  if (m >= 2 && m <= 64 && k > 0 && g_fast_small_batches.load(std::memory_order_relaxed)) {
    gemm_f32_onednn(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);  // serving only
    return;
  }
  sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm_rounded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const uint16_t* a,
                  int64_t lda, const uint16_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  g_flops.fetch_add(static_cast<uint64_t>(2 * m * n * k), std::memory_order_relaxed);
  gemm_bf16(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (m == 1 && k > 0) {
    // One row (a served request, a decoded token): a matrix-vector product.
    // sgemm would first pack all of B, which then costs more than the product.
    const auto inc_a = static_cast<blasint>(trans_a ? lda : 1);
    if (trans_b)  // c[j] = sum_p a[p] * b[j][p]
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k), alpha, b,
                  static_cast<blasint>(ldb), a, inc_a, beta, c, 1);
    else  // c[j] = sum_p a[p] * b[p][j]
      cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<blasint>(k), static_cast<blasint>(n), alpha, b,
                  static_cast<blasint>(ldb), a, inc_a, beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

void gemm_reference(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * lda + i] : a[i * lda + p];
        const double bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += av * bv;
      }
      const double prior = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[i * ldc + j];
      c[i * ldc + j] = static_cast<float>(alpha * sum + prior);
    }
  }
}

namespace {
std::atomic<int> g_threads{1};
int g_applied = 0;  // the count OpenBLAS and the pool were last given (0: never); under g_threads_mutex
std::mutex g_threads_mutex;

// More threads than this is a typo, not a machine.
constexpr int kMaxThreads = 1024;

// The count asked for with 0: GRADMESH_NUM_THREADS when set, else every core.
int default_threads() {
  const std::string text = env_string("GRADMESH_NUM_THREADS");
  if (text.empty()) return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::optional<int64_t> threads = try_parse_int(text, 1, kMaxThreads);
  if (!threads)
    throw_error(ErrorKind::kUsage, "environment variable GRADMESH_NUM_THREADS",
                "expected an integer from 1 to " + std::to_string(kMaxThreads) +
                    " (or unset for all cores), got '" + text + "'");
  return static_cast<int>(*threads);
}

}  // namespace

// Asking again for the count in force changes nothing: ranks that run as
// threads of one process (the in-process tests) each set the same count
// while the others already compute.
void set_num_threads(int threads) {
  if (threads <= 0) threads = default_threads();
  std::lock_guard<std::mutex> lock(g_threads_mutex);
  if (threads == g_applied) return;
  g_applied = threads;
  g_threads = threads;
  openblas_set_num_threads(threads);
  resize_compute_pool(threads);
}

int num_threads() { return g_threads; }

}  // namespace gradmesh::kernels
