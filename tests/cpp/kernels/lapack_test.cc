// The LAPACK driver (batching, broadcasting, triangles, info) over a small reference provider:
// core has no LAPACK of its own, the glue registers the host's.
#include "kernels/linalg/lapack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ember::kernels {
namespace {

// Reference routines on column-major doubles (a(i, j) = a[i + j * lda]), lower Cholesky and
// partial-pivoting LU, enough to check the driver.
Status ref_potrf(DType, bool upper, int64_t n, void* data, int64_t lda, int32_t* info) {
    if (upper) return unimplemented("test provider: lower only");
    auto* a = static_cast<double*>(data);
    *info = 0;
    for (int64_t j = 0; j < n; ++j) {
        double d = a[j + j * lda];
        for (int64_t k = 0; k < j; ++k) d -= a[j + k * lda] * a[j + k * lda];
        if (!(d > 0)) {
            *info = static_cast<int32_t>(j + 1);
            return Status();
        }
        a[j + j * lda] = std::sqrt(d);
        for (int64_t i = j + 1; i < n; ++i) {
            double s = a[i + j * lda];
            for (int64_t k = 0; k < j; ++k) s -= a[i + k * lda] * a[j + k * lda];
            a[i + j * lda] = s / a[j + j * lda];
        }
    }
    return Status();
}

Status ref_getrf(DType, int64_t m, int64_t n, void* data, int64_t lda, int32_t* piv, int32_t* info) {
    auto* a = static_cast<double*>(data);
    *info = 0;
    for (int64_t j = 0; j < std::min(m, n); ++j) {
        int64_t p = j;
        for (int64_t i = j + 1; i < m; ++i)
            if (std::fabs(a[i + j * lda]) > std::fabs(a[p + j * lda])) p = i;
        piv[j] = static_cast<int32_t>(p + 1);
        if (p != j)
            for (int64_t k = 0; k < n; ++k) std::swap(a[j + k * lda], a[p + k * lda]);
        if (a[j + j * lda] == 0) {
            if (*info == 0) *info = static_cast<int32_t>(j + 1);
            continue;
        }
        for (int64_t i = j + 1; i < m; ++i) {
            a[i + j * lda] /= a[j + j * lda];
            for (int64_t k = j + 1; k < n; ++k) a[i + k * lda] -= a[i + j * lda] * a[j + k * lda];
        }
    }
    return Status();
}

Status ref_getrs(DType, bool, int64_t n, int64_t k, const void* data, int64_t lda, const int32_t* piv, void* bdata,
                 int64_t ldb) {
    const auto* a = static_cast<const double*>(data);
    auto* b = static_cast<double*>(bdata);
    for (int64_t c = 0; c < k; ++c) {
        double* x = b + c * ldb;
        for (int64_t j = 0; j < n; ++j) std::swap(x[j], x[piv[j] - 1]);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t j = 0; j < i; ++j) x[i] -= a[i + j * lda] * x[j];
        for (int64_t i = n - 1; i >= 0; --i) {
            for (int64_t j = i + 1; j < n; ++j) x[i] -= a[i + j * lda] * x[j];
            x[i] /= a[i + i * lda];
        }
    }
    return Status();
}

TensorView batch_of(double* data, int64_t batch, int64_t rows, int64_t cols) {
    TensorView v;
    v.data = data;
    v.dtype = DType::kFloat64;
    v.ndim = 3;
    v.sizes[0] = batch, v.sizes[1] = rows, v.sizes[2] = cols;
    v.strides[0] = rows * cols, v.strides[1] = 1, v.strides[2] = rows;
    return v;
}

TensorView ints(int32_t* data, int64_t batch, int64_t inner = -1) {
    TensorView v;
    v.data = data;
    v.dtype = DType::kInt32;
    v.ndim = inner < 0 ? 1 : 2;
    v.sizes[0] = batch;
    v.strides[0] = inner < 0 ? 1 : inner;
    if (inner >= 0) v.sizes[1] = inner, v.strides[1] = 1;
    return v;
}

class Lapack : public ::testing::Test {
  protected:
    void SetUp() override {
        LapackProvider p;
        p.potrf = &ref_potrf;
        p.getrf = &ref_getrf;
        p.getrs = &ref_getrs;
        set_lapack_provider(p, "test reference");
    }
    void TearDown() override { set_lapack_provider(LapackProvider{}, "none"); }
};

TEST_F(Lapack, CholeskyZeroesTheUpperTriangleAndReportsInfoPerMatrix) {
    // [[4, 2], [2, 5]] = L L^T with L = [[2, 0], [1, 2]]; [[1, 2], [2, 1]] is indefinite.
    std::vector<double> a = {4, 2, 2, 5, 1, 2, 2, 1};
    std::vector<int32_t> info(2, -7);
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(cholesky(batch_of(a.data(), 2, 2, 2), ints(info.data(), 2), false, &pool).ok());
    EXPECT_EQ(a[0], 2);
    EXPECT_EQ(a[1], 1);
    EXPECT_EQ(a[2], 0) << "the upper triangle is zeroed";
    EXPECT_EQ(a[3], 2);
    EXPECT_EQ(info[0], 0);
    EXPECT_EQ(info[1], 2) << "the second leading minor is not positive";
}

TEST_F(Lapack, LuSolveBroadcastsSharedFactors) {
    // One factorization solved against a batch of 3 right-hand sides.
    std::vector<double> a = {0, 1, 2, 3};  // columns (0, 1), (2, 3): needs a row swap
    std::vector<int32_t> piv(2), info(1);
    ASSERT_TRUE(lu_factor(batch_of(a.data(), 1, 2, 2), ints(piv.data(), 1, 2), ints(info.data(), 1), nullptr).ok());
    EXPECT_EQ(info[0], 0);
    EXPECT_EQ(piv[0], 2);
    std::vector<double> x = {2, 3, 0, 1, 4, 7};  // A x = b for x = (1, 1), (0, ...) ...
    std::vector<double> b = x;
    ASSERT_TRUE(lu_solve(batch_of(b.data(), 3, 2, 1), batch_of(a.data(), 1, 2, 2), ints(piv.data(), 1, 2), false,
                         nullptr).ok());
    const double m[4] = {0, 1, 2, 3};  // the original A, column-major
    for (int c = 0; c < 3; ++c) {
        for (int i = 0; i < 2; ++i) {
            EXPECT_NEAR(m[i] * b[2 * c] + m[i + 2] * b[2 * c + 1], x[2 * c + i], 1e-12) << "rhs " << c;
        }
    }
}

TEST_F(Lapack, RefusesBadArgumentsAndAMissingProvider) {
    std::vector<double> a(4);
    std::vector<int32_t> info(1);
    EXPECT_FALSE(cholesky(batch_of(a.data(), 1, 2, 1), ints(info.data(), 1), false, nullptr).ok()) << "not square";
    set_lapack_provider(LapackProvider{}, "none");
    Status s = cholesky(batch_of(a.data(), 1, 2, 2), ints(info.data(), 1), false, nullptr);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("no LAPACK provider"), std::string::npos);
}

}  // namespace
}  // namespace ember::kernels
