#include "kernels/copy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace ember::kernels {
namespace {

TensorView view(void* data, DType t, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
    TensorView v;
    v.data = data;
    v.dtype = t;
    v.ndim = static_cast<int>(sizes.size());
    for (int i = 0; i < v.ndim; ++i) {
        v.sizes[i] = sizes[i];
        v.strides[i] = strides[i];
    }
    return v;
}

}  // namespace

TEST(Copy, TransposedStridesSameType) {
    std::vector<float> src(6), dst(6, -1);
    std::iota(src.begin(), src.end(), 0.f);  // 2x3 row-major
    // dst (3x2 contiguous) = src^T
    auto d = view(dst.data(), DType::kFloat32, {3, 2}, {2, 1});
    auto s = view(src.data(), DType::kFloat32, {3, 2}, {1, 3});
    ASSERT_TRUE(copy(d, s, nullptr).ok());
    EXPECT_EQ(dst, (std::vector<float>{0, 3, 1, 4, 2, 5}));
}

TEST(Copy, BroadcastSourceWithZeroStride) {
    std::vector<int32_t> src = {7, 8, 9}, dst(12);
    auto d = view(dst.data(), DType::kInt32, {4, 3}, {3, 1});
    auto s = view(src.data(), DType::kInt32, {4, 3}, {0, 1});
    ASSERT_TRUE(copy(d, s, nullptr).ok());
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 3; ++c) EXPECT_EQ(dst[r * 3 + c], src[c]);
}

TEST(Copy, ConversionsFollowPyTorchRules) {
    std::vector<float> f = {1.9f, -2.7f, 0.f, 3.0f};
    std::vector<int64_t> i(4);
    ASSERT_TRUE(copy(view(i.data(), DType::kInt64, {4}, {1}), view(f.data(), DType::kFloat32, {4}, {1}), nullptr).ok());
    EXPECT_EQ(i, (std::vector<int64_t>{1, -2, 0, 3})) << "float to int truncates";
    std::vector<uint8_t> b(4);
    ASSERT_TRUE(copy(view(b.data(), DType::kBool, {4}, {1}), view(f.data(), DType::kFloat32, {4}, {1}), nullptr).ok());
    EXPECT_EQ(b, (std::vector<uint8_t>{1, 1, 0, 1}));
    std::vector<double> back(4);
    ASSERT_TRUE(copy(view(back.data(), DType::kFloat64, {4}, {1}), view(b.data(), DType::kBool, {4}, {1}), nullptr).ok());
    EXPECT_EQ(back, (std::vector<double>{1, 1, 0, 1}));
}

TEST(Copy, HalfAndBFloat16RoundToNearestEven) {
    // 1 + 2^-8 lies halfway between two bfloat16 values: ties go to even (1.0).
    std::vector<float> f = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.f, 1e-7f, -0.f,
                            std::numeric_limits<float>::infinity()};
    std::vector<uint16_t> bf(f.size()), h(f.size());
    ASSERT_TRUE(copy(view(bf.data(), DType::kBFloat16, {6}, {1}), view(f.data(), DType::kFloat32, {6}, {1}), nullptr).ok());
    EXPECT_EQ(bf[0], 0x3f80);
    EXPECT_EQ(bf[1], 0x3f82);
    ASSERT_TRUE(copy(view(h.data(), DType::kFloat16, {6}, {1}), view(f.data(), DType::kFloat32, {6}, {1}), nullptr).ok());
    EXPECT_EQ(h[2], 0x7bff) << "65504 is the largest half";
    EXPECT_EQ(h[3], 0x0002) << "1e-7 rounds to the subnormal 2 * 2^-24";
    EXPECT_EQ(h[4], 0x8000);
    EXPECT_EQ(h[5], 0x7c00);
    std::vector<float> round_trip(6);
    ASSERT_TRUE(copy(view(round_trip.data(), DType::kFloat32, {6}, {1}), view(h.data(), DType::kFloat16, {6}, {1}), nullptr).ok());
    EXPECT_EQ(round_trip[2], 65504.f);
    EXPECT_FLOAT_EQ(round_trip[3], 2.0f / 16777216.0f);
    EXPECT_TRUE(std::isinf(round_trip[5]));
}

TEST(Copy, Float8RoundsToNearestEvenSaturatingE4M3) {
    // e4m3fn: 1 + 1/16 ties to 1 (even), 448 and beyond saturate, NaN stays NaN (0x7f), the
    // smallest subnormal is 2^-9. e5m2: 57344 is its largest value, 65536 rounds to infinity.
    std::vector<float> src = {1.0625f, 1.1875f, 448.f, 500.f, INFINITY, NAN, std::ldexp(1.f, -9), -0.f, 65536.f, 57344.f};
    std::vector<uint8_t> e4(src.size()), e5(src.size());
    const int64_t n = static_cast<int64_t>(src.size());
    ASSERT_TRUE(copy(view(e4.data(), DType::kFloat8E4M3FN, {n}, {1}), view(src.data(), DType::kFloat32, {n}, {1}), nullptr).ok());
    ASSERT_TRUE(copy(view(e5.data(), DType::kFloat8E5M2, {n}, {1}), view(src.data(), DType::kFloat32, {n}, {1}), nullptr).ok());
    EXPECT_EQ(e4, (std::vector<uint8_t>{0x38, 0x3a, 0x7e, 0x7e, 0x7e, 0x7f, 0x01, 0x80, 0x7e, 0x7e}));
    EXPECT_EQ(e5[8], 0x7c);
    EXPECT_EQ(e5[9], 0x7b);
    std::vector<float> back(src.size());
    ASSERT_TRUE(copy(view(back.data(), DType::kFloat32, {n}, {1}), view(e4.data(), DType::kFloat8E4M3FN, {n}, {1}), nullptr).ok());
    EXPECT_EQ(back[2], 448.f);
    EXPECT_TRUE(std::isnan(back[5]));
    EXPECT_EQ(back[6], std::ldexp(1.f, -9));
    EXPECT_TRUE(std::signbit(back[7]));
}

TEST(Copy, LargeParallelCopyMatches) {
    runtime::ThreadPool pool(4);
    std::vector<float> src(1 << 20), dst(1 << 20);
    std::iota(src.begin(), src.end(), 0.f);
    std::vector<double> wide(src.size());
    ASSERT_TRUE(copy(view(wide.data(), DType::kFloat64, {1024, 1024}, {1024, 1}),
                     view(src.data(), DType::kFloat32, {1024, 1024}, {1024, 1}), &pool).ok());
    for (size_t k = 0; k < src.size(); k += 4099) ASSERT_EQ(wide[k], static_cast<double>(src[k]));
}

TEST(Copy, RejectsComplexConversionAndShapeMismatch) {
    std::vector<float> a(4), b(4);
    EXPECT_EQ(copy(view(a.data(), DType::kFloat32, {4}, {1}), view(b.data(), DType::kComplex64, {2}, {1}), nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(copy(view(a.data(), DType::kFloat32, {2}, {1}), view(b.data(), DType::kComplex64, {2}, {1}), nullptr).code(),
              StatusCode::kUnimplemented);
}

}  // namespace ember::kernels
