// Dense factorizations and their solves — Cholesky and LU — behind a narrow provider interface,
// as kernels::gemm is: the provider is a LAPACK (the glue registers the host's at start-up; a
// chip would register its solver library), called once per matrix, and core drives the
// batches, split over the device's pool. The provider is called on pool threads and must be
// thread-safe; it runs single-threaded there, since the pool's threads are the cores.
//
// Layout: every view is 3-d (batch, rows, cols) with column-major matrices (strides[1] == 1,
// strides[2] >= rows), LAPACK's layout and the one PyTorch's linalg results use. A batch of 1
// broadcasts against a larger one where noted. float32 and float64.
//
// Errors: a singular or indefinite matrix is not a Status error; it is reported per matrix in
// `info` (int32, one per batch element, LAPACK's convention: 0 = success, k > 0 = failed at
// column k), which the caller checks as the CPU does. A Status error means bad arguments or no
// provider.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "kernels/tensor_view.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {

struct LapackProvider {
    // xPOTRF: a = L L^T (upper: U^T U) in place, in the given triangle; info as LAPACK's.
    Status (*potrf)(DType t, bool upper, int64_t n, void* a, int64_t lda, int32_t* info) = nullptr;
    // xPOTRS: b = A^-1 b in place from the factor of potrf.
    Status (*potrs)(DType t, bool upper, int64_t n, int64_t nrhs, const void* a, int64_t lda, void* b,
                    int64_t ldb) = nullptr;
    // xGETRF: a = P L U in place (m x n), pivots 1-based (min(m, n) of them).
    Status (*getrf)(DType t, int64_t m, int64_t n, void* a, int64_t lda, int32_t* pivots, int32_t* info) = nullptr;
    // xGETRS: b = A^-1 b (transpose: A^-T b) in place from the factors of getrf.
    Status (*getrs)(DType t, bool transpose, int64_t n, int64_t nrhs, const void* a, int64_t lda,
                    const int32_t* pivots, void* b, int64_t ldb) = nullptr;
};

// Installs the provider (call at start-up, before any factorization runs).
void set_lapack_provider(const LapackProvider& provider, const char* name);
const char* lapack_provider_name();

// a (batch, n, n) in place: its Cholesky factor in the lower (upper) triangle, the other
// triangle zeroed; info (batch) as potrf's.
Status cholesky(const TensorView& a, const TensorView& info, bool upper, runtime::ThreadPool* pool);

// b (batch, n, k) = A^-1 b in place, from factors (batch or 1, n, n) of cholesky().
Status cholesky_solve(const TensorView& b, const TensorView& factor, bool upper, runtime::ThreadPool* pool);

// a (batch, m, n) in place: P L U with unit-diagonal L below and U on and above the diagonal;
// pivots (batch, min(m, n)) int32, 1-based; info (batch) as getrf's.
Status lu_factor(const TensorView& a, const TensorView& pivots, const TensorView& info, runtime::ThreadPool* pool);

// b (batch, n, k) = A^-1 b (transpose: A^-T b) in place, from lu (batch or 1, n, n) and pivots
// (batch or 1, n) of lu_factor().
Status lu_solve(const TensorView& b, const TensorView& lu, const TensorView& pivots, bool transpose,
                runtime::ThreadPool* pool);

}  // namespace ember::kernels
