// kernels::gemm split across a pool gives the same result as one provider call, by batch and by
// blocks of rows, with strided (transposed) operands and beta != 0.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "../compiler/compiler_test_util.h"
#include "kernels/gemm/gemm.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {
namespace {

TensorView view3(std::vector<float>& buf, int64_t b, int64_t r, int64_t c, bool transposed) {
    TensorView v;
    v.data = buf.data();
    v.dtype = DType::kFloat32;
    v.ndim = 3;
    v.sizes[0] = b;
    v.sizes[1] = r;
    v.sizes[2] = c;
    v.strides[0] = r * c;
    v.strides[1] = transposed ? 1 : c;
    v.strides[2] = transposed ? r : 1;
    return v;
}

void check_split(int64_t batch, int64_t m, int64_t k, int64_t n) {
    compiler::test::use_reference_gemm();
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    std::vector<float> a(batch * m * k), b(batch * k * n), c1(batch * m * n), c2;
    for (float& x : a) x = dist(gen);
    for (float& x : b) x = dist(gen);
    for (float& x : c1) x = dist(gen);
    c2 = c1;
    GemmArgs one{view3(a, batch, m, k, false), view3(b, batch, k, n, true), view3(c1, batch, m, n, false), 0.5, 2.0};
    GemmArgs split = one;
    split.c = view3(c2, batch, m, n, false);
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(gemm(one).ok());
    ASSERT_TRUE(gemm(split, &pool).ok());
    EXPECT_EQ(c1, c2);  // each element is computed by the same provider code either way
}

TEST(Gemm, SplitByRowsMatchesOneCall) { check_split(1, 256, 128, 96); }
TEST(Gemm, SplitByBatchMatchesOneCall) { check_split(4, 64, 128, 80); }
TEST(Gemm, SmallProductsAreNotSplitAndStillRight) { check_split(1, 8, 4, 3); }

TEST(Gemm, ShapeErrorsAreReportedBeforeSplitting) {
    std::vector<float> a(64), b(64), c(64);
    GemmArgs bad{view3(a, 1, 8, 8, false), view3(b, 1, 4, 16, false), view3(c, 1, 8, 8, false), 1, 0};
    runtime::ThreadPool pool(2);
    Status st = gemm(bad, &pool);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("shape mismatch"), std::string::npos);
}

}  // namespace
}  // namespace ember::kernels
