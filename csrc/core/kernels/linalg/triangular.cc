#include "kernels/linalg/triangular.h"

#include <vector>

namespace ember::kernels {
namespace {

template <typename T>
void solve_one(T* x, const T* a, const T* b, int64_t n, int64_t k, bool upper, bool unit, bool transpose_a) {
    // Element (i, j) of the effective matrix: A or A^T. Transposing swaps the triangle.
    auto at = [&](int64_t i, int64_t j) { return transpose_a ? a[j * n + i] : a[i * n + j]; };
    const bool lower = transpose_a ? upper : !upper;
    if (x != b) {
        for (int64_t i = 0; i < n * k; ++i) x[i] = b[i];
    }
    for (int64_t step = 0; step < n; ++step) {
        const int64_t i = lower ? step : n - 1 - step;
        T* xi = x + i * k;
        // x_i -= sum over the solved rows j of A(i, j) x_j, then divide by A(i, i).
        const int64_t j0 = lower ? 0 : i + 1, j1 = lower ? i : n;
        for (int64_t j = j0; j < j1; ++j) {
            const T aij = at(i, j);
            if (aij == T(0)) continue;
            const T* xj = x + j * k;
            for (int64_t c = 0; c < k; ++c) xi[c] -= aij * xj[c];
        }
        if (!unit) {
            const T d = at(i, i);
            for (int64_t c = 0; c < k; ++c) xi[c] /= d;
        }
    }
}

template <typename T>
Status run(const TensorView& x, const TensorView& a, const TensorView& b, bool upper, bool unit, bool transpose_a,
           runtime::ThreadPool* pool) {
    const int64_t batch = x.sizes[0], n = x.sizes[1], k = x.sizes[2];
    const int64_t a_batch = a.sizes[0];
    auto* xp = static_cast<T*>(x.data);
    const auto* ap = static_cast<const T*>(a.data);
    const auto* bp = static_cast<const T*>(b.data);
    auto body = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            solve_one(xp + i * n * k, ap + (a_batch == 1 ? 0 : i) * n * n, bp + i * n * k, n, k, upper, unit,
                      transpose_a);
        }
    };
    if (pool && batch > 1) pool->parallel_for(batch, 1, body);
    else body(0, batch);
    return Status();
}

}  // namespace

Status solve_triangular(const TensorView& x, const TensorView& a, const TensorView& b, bool upper, bool unit,
                        bool transpose_a, runtime::ThreadPool* pool) {
    if (x.ndim != 3 || a.ndim != 3 || b.ndim != 3) return invalid_argument("solve_triangular: expects 3-d views");
    if (!x.is_contiguous() || !a.is_contiguous() || !b.is_contiguous())
        return invalid_argument("solve_triangular: expects contiguous tensors");
    const int64_t n = x.sizes[1];
    if (a.sizes[1] != n || a.sizes[2] != n || b.sizes[1] != n || b.sizes[2] != x.sizes[2] || b.sizes[0] != x.sizes[0] ||
        (a.sizes[0] != 1 && a.sizes[0] != x.sizes[0]))
        return invalid_argument("solve_triangular: shapes do not match");
    if (a.dtype != x.dtype || b.dtype != x.dtype) return invalid_argument("solve_triangular: dtypes differ");
    switch (x.dtype) {
        case DType::kFloat32: return run<float>(x, a, b, upper, unit, transpose_a, pool);
        case DType::kFloat64: return run<double>(x, a, b, upper, unit, transpose_a, pool);
        default: return unimplemented("solve_triangular: only float32 and float64");
    }
}

}  // namespace ember::kernels
