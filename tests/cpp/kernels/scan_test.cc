#include "kernels/reduce/scan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace ember::kernels {
namespace {

// A contiguous [1, n, 1] view: one line scanned along dim 1.
TensorView line(void* data, DType dtype, int64_t n) {
    TensorView v;
    v.data = data;
    v.dtype = dtype;
    v.ndim = 3;
    v.sizes[0] = 1;
    v.sizes[1] = n;
    v.sizes[2] = 1;
    v.strides[0] = n;
    v.strides[1] = 1;
    v.strides[2] = 1;
    return v;
}

}  // namespace

TEST(Scan, CummaxTakesTheLaterTieAndKeepsNaN) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> in = {1, 3, 3, 2, nan, 5, nan, 7};
    std::vector<float> out(in.size());
    std::vector<int64_t> idx(in.size());
    const int64_t n = static_cast<int64_t>(in.size());
    ASSERT_TRUE(scan(ScanOp::kMax, line(out.data(), DType::kFloat32, n), line(idx.data(), DType::kInt64, n),
                     line(in.data(), DType::kFloat32, n), nullptr).ok());
    EXPECT_EQ(idx, (std::vector<int64_t>{0, 1, 2, 2, 4, 4, 6, 6}));
    EXPECT_EQ(out[3], 3.f);
    EXPECT_TRUE(std::isnan(out[5]) && std::isnan(out[7]));
}

TEST(Scan, LogCumSumExpHandlesInfinitiesAndUnderflow) {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> in = {-inf, -1000, -1000, inf, inf};
    std::vector<double> out(in.size());
    const int64_t n = static_cast<int64_t>(in.size());
    ASSERT_TRUE(scan(ScanOp::kLogSumExp, line(out.data(), DType::kFloat64, n), TensorView{},
                     line(in.data(), DType::kFloat64, n), nullptr).ok());
    EXPECT_EQ(out[0], -inf);
    EXPECT_DOUBLE_EQ(out[1], -1000);
    EXPECT_DOUBLE_EQ(out[2], -1000 + std::log(2.0));  // exp(-1000) is 0: no -inf here
    EXPECT_EQ(out[3], inf);
    EXPECT_EQ(out[4], inf);  // inf + inf, not NaN
}

TEST(Scan, RefusesLogCumSumExpOfIntegers) {
    std::vector<int64_t> in = {1, 2}, out(2);
    Status st = scan(ScanOp::kLogSumExp, line(out.data(), DType::kInt64, 2), TensorView{},
                     line(in.data(), DType::kInt64, 2), nullptr);
    EXPECT_FALSE(st.ok());
}

}  // namespace ember::kernels
