#include "kernels/linalg/lapack.h"

#include <algorithm>
#include <string>

namespace ember::kernels {
namespace {

LapackProvider g_provider;
const char* g_provider_name = "none";

bool lapack_dtype(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// A column-major batch of matrices: (batch, rows, cols), strides[1] == 1.
Status check_matrices(const char* op, const TensorView& v, const char* what) {
    if (v.ndim != 3) return invalid_argument(std::string(op) + ": " + what + " must be a 3-d (batch, rows, cols) view");
    if (!lapack_dtype(v.dtype)) return unimplemented(std::string(op) + ": float32 and float64 only");
    if (v.sizes[1] > 1 && v.strides[1] != 1) return invalid_argument(std::string(op) + ": " + what + " must be column-major");
    if (v.sizes[2] > 1 && v.strides[2] < v.sizes[1]) return invalid_argument(std::string(op) + ": " + what + " overlaps itself");
    return Status();
}

Status check_int32(const char* op, const TensorView& v, int ndim, int64_t batch, const char* what) {
    if (v.dtype != DType::kInt32 || v.ndim != ndim || v.sizes[0] != batch)
        return invalid_argument(std::string(op) + ": " + what + " must be int32 with one entry per matrix");
    return Status();
}

Status check_provider(const char* op, bool present) {
    if (present) return Status();
    return failed_precondition(std::string(op) + ": no LAPACK provider is registered");
}

int64_t leading_dim(const TensorView& v) { return std::max<int64_t>({v.strides[2], v.sizes[1], 1}); }

char* matrix(const TensorView& v, int64_t b) {
    const int64_t i = v.sizes[0] == 1 ? 0 : b;  // a batch of one broadcasts
    return static_cast<char*>(v.data) + i * v.strides[0] * element_size(v.dtype);
}

int32_t* int_row(const TensorView& v, int64_t b) {
    const int64_t i = v.sizes[0] == 1 ? 0 : b;
    return static_cast<int32_t*>(v.data) + i * v.strides[0];
}

// Runs fn(b) for every matrix, on the pool only when the batch holds more than about kGrain
// multiply-adds (a batch of small matrices does not pay a pool hand-off); returns the first error.
template <typename F>
Status for_each_matrix(int64_t batch, int64_t n, runtime::ThreadPool* pool, F&& fn) {
    constexpr int64_t kGrain = 1 << 18;
    const int64_t work = std::max<int64_t>(1, n * n * n);
    const int64_t grain = std::max<int64_t>(1, kGrain / work);
    if (pool != nullptr && batch > grain)
        return pool->for_each_item(batch, [&](int64_t b, runtime::ThreadPool*) { return fn(b); });
    for (int64_t b = 0; b < batch; ++b) EMBER_RETURN_IF_ERROR(fn(b));
    return Status();
}

template <typename T>
void zero_triangle(T* a, int64_t n, int64_t ld, bool keep_upper) {
    for (int64_t j = 0; j < n; ++j) {
        if (keep_upper) std::fill(a + j * ld + j + 1, a + j * ld + n, T(0));  // below the diagonal
        else std::fill(a + j * ld, a + j * ld + j, T(0));                     // above it
    }
}

}  // namespace

void set_lapack_provider(const LapackProvider& provider, const char* name) {
    g_provider = provider;
    g_provider_name = name;
}

const char* lapack_provider_name() { return g_provider_name; }

Status cholesky(const TensorView& a, const TensorView& info, bool upper, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_matrices("cholesky", a, "the matrix"));
    EMBER_RETURN_IF_ERROR(check_int32("cholesky", info, 1, a.sizes[0], "info"));
    EMBER_RETURN_IF_ERROR(check_provider("cholesky", g_provider.potrf != nullptr));
    const int64_t n = a.sizes[1];
    if (a.sizes[2] != n) return invalid_argument("cholesky: the matrices must be square");
    const int64_t ld = leading_dim(a);
    return for_each_matrix(a.sizes[0], n, pool, [&](int64_t b) -> Status {
        int32_t* status = int_row(info, b);
        *status = 0;
        if (n == 0) return Status();
        char* m = matrix(a, b);
        EMBER_RETURN_IF_ERROR(g_provider.potrf(a.dtype, upper, n, m, ld, status));
        if (a.dtype == DType::kFloat32) zero_triangle(reinterpret_cast<float*>(m), n, ld, upper);
        else zero_triangle(reinterpret_cast<double*>(m), n, ld, upper);
        return Status();
    });
}

Status cholesky_solve(const TensorView& b, const TensorView& factor, bool upper, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_matrices("cholesky_solve", b, "the right-hand side"));
    EMBER_RETURN_IF_ERROR(check_matrices("cholesky_solve", factor, "the factor"));
    EMBER_RETURN_IF_ERROR(check_provider("cholesky_solve", g_provider.potrs != nullptr));
    const int64_t n = b.sizes[1], k = b.sizes[2];
    if (factor.dtype != b.dtype || factor.sizes[1] != n || factor.sizes[2] != n ||
        (factor.sizes[0] != b.sizes[0] && factor.sizes[0] != 1))
        return invalid_argument("cholesky_solve: the factor does not match the right-hand side");
    if (n == 0 || k == 0) return Status();
    const int64_t ldb = leading_dim(b), lda = leading_dim(factor);
    return for_each_matrix(b.sizes[0], n, pool, [&](int64_t i) {
        return g_provider.potrs(b.dtype, upper, n, k, matrix(factor, i), lda, matrix(b, i), ldb);
    });
}

Status lu_factor(const TensorView& a, const TensorView& pivots, const TensorView& info, runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_matrices("lu_factor", a, "the matrix"));
    EMBER_RETURN_IF_ERROR(check_int32("lu_factor", pivots, 2, a.sizes[0], "pivots"));
    EMBER_RETURN_IF_ERROR(check_int32("lu_factor", info, 1, a.sizes[0], "info"));
    EMBER_RETURN_IF_ERROR(check_provider("lu_factor", g_provider.getrf != nullptr));
    const int64_t m = a.sizes[1], n = a.sizes[2];
    if (pivots.sizes[1] != std::min(m, n) || (pivots.sizes[1] > 1 && pivots.strides[1] != 1))
        return invalid_argument("lu_factor: pivots must hold min(rows, cols) contiguous entries per matrix");
    const int64_t ld = leading_dim(a);
    return for_each_matrix(a.sizes[0], std::max(m, n), pool, [&](int64_t b) -> Status {
        int32_t* status = int_row(info, b);
        *status = 0;
        if (m == 0 || n == 0) return Status();
        return g_provider.getrf(a.dtype, m, n, matrix(a, b), ld, int_row(pivots, b), status);
    });
}

Status lu_solve(const TensorView& b, const TensorView& lu, const TensorView& pivots, bool transpose,
                runtime::ThreadPool* pool) {
    EMBER_RETURN_IF_ERROR(check_matrices("lu_solve", b, "the right-hand side"));
    EMBER_RETURN_IF_ERROR(check_matrices("lu_solve", lu, "the factors"));
    EMBER_RETURN_IF_ERROR(check_provider("lu_solve", g_provider.getrs != nullptr));
    const int64_t n = b.sizes[1], k = b.sizes[2];
    if (lu.dtype != b.dtype || lu.sizes[1] != n || lu.sizes[2] != n ||
        (lu.sizes[0] != b.sizes[0] && lu.sizes[0] != 1))
        return invalid_argument("lu_solve: the factors do not match the right-hand side");
    if (pivots.dtype != DType::kInt32 || pivots.ndim != 2 || pivots.sizes[0] != lu.sizes[0] || pivots.sizes[1] != n ||
        (n > 1 && pivots.strides[1] != 1))
        return invalid_argument("lu_solve: pivots must be int32 (batch, n), contiguous per matrix");
    if (n == 0 || k == 0) return Status();
    const int64_t ldb = leading_dim(b), lda = leading_dim(lu);
    return for_each_matrix(b.sizes[0], n, pool, [&](int64_t i) {
        return g_provider.getrs(b.dtype, transpose, n, k, matrix(lu, i), lda, int_row(pivots, i), matrix(b, i), ldb);
    });
}

}  // namespace ember::kernels
