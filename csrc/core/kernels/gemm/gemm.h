// Batched matrix product C = beta * C + alpha * (A @ B), the one entry point every matmul-like
// op (mm, bmm, addmm, baddbmm, linear, matmul) reaches.
//
// A is (batch, m, k), B is (batch, k, n), C is (batch, m, n), each with any strides (a
// transposed operand is just a stride order), in float32, float64, bfloat16 or float16 (or an
// integer type, computed by a plain loop that wraps on overflow as the CPU does); low
// precision inputs accumulate in float32. The arithmetic is done by a GEMM provider — a
// tuned BLAS behind this narrow interface — which the host registers once at start-up. The
// provider is called on a stream worker and must be thread-safe.
#pragma once

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

struct GemmArgs {
    TensorView a;  // 3-d: (batch, m, k)
    TensorView b;  // 3-d: (batch, k, n)
    TensorView c;  // 3-d: (batch, m, n); read when beta != 0
    double alpha = 1.0;
    double beta = 0.0;
    int64_t int_alpha = 1;  // integer products use these instead, exactly
    int64_t int_beta = 0;
};

using GemmProvider = Status (*)(const GemmArgs& args);

// Installs the provider (not thread-safe against concurrent gemm(); call at start-up).
void set_gemm_provider(GemmProvider provider, const char* name);
const char* gemm_provider_name();

// A single-threaded float32 product on raw row-major pointers, for kernels that multiply small
// blocks in their inner loops (attention): C (m x n, ldc) = op(A) @ op(B), plus C when
// `accumulate`; op(A) is A (m x k, lda), or with trans_a the transpose of A given as k x m; op(B)
// is B (k x n, ldb), or with trans_b the transpose of B given as n x k. The host registers one
// (a BLAS sgemm) at start-up; until then block_sgemm() is null and callers use loops of their
// own. Runs on the calling thread and must be thread-safe.
using BlockSgemm = void (*)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                            int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate);
void set_block_sgemm(BlockSgemm fn);
BlockSgemm block_sgemm();

// Validates shapes and dtypes, then runs the provider.
Status gemm(const GemmArgs& args);

// The same, split across `pool`: by batch when there are enough matrices, else by blocks of
// rows of A and C, each block a provider call on the calling pool thread. The provider then
// runs single-threaded, so the device's own threads do all the work: a library's thread team
// would compete with them for the cores. Small products are not split.
Status gemm(const GemmArgs& args, runtime::ThreadPool* pool);

}  // namespace ember::kernels
