#include "kernels/index/reorder.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "strided_test_util.h"

namespace ember::kernels {
namespace {

using strided_test::base_of;
using strided_test::Buffer;

std::vector<double> iota_values(size_t n) {
    std::vector<double> v(n);
    std::iota(v.begin(), v.end(), 0.0);
    return v;
}

// Coordinates of row-major position p.
std::vector<int64_t> coords(const std::vector<int64_t>& sizes, int64_t p) {
    std::vector<int64_t> c(sizes.size());
    for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
        c[d] = p % sizes[d];
        p /= sizes[d];
    }
    return c;
}

double at(const Buffer& b, const TensorView& v, const std::vector<int64_t>& c) {
    int64_t off = base_of(b, v);
    for (size_t d = 0; d < c.size(); ++d) off += c[d] * v.strides[d];
    return b.get(off);
}

// in is stored [2, 3, 4] and viewed transposed as [4, 3, 2]: no dims merge.
constexpr int64_t kSizes[] = {4, 3, 2};
const std::vector<int64_t> kIn = {4, 3, 2}, kInStrides = {1, 4, 12};

}  // namespace

TEST(Flip, EveryMaskOverStridedInput) {
    for (DType t : {DType::kFloat32, DType::kInt64, DType::kFloat16}) {
        Buffer in_b(t, iota_values(24));
        TensorView in = in_b.view(kIn, kInStrides);
        for (uint64_t mask = 0; mask < 8; ++mask) {
            Buffer out_b(t, 24);
            TensorView out = out_b.view(kIn);
            ASSERT_TRUE(flip(out, in, mask, nullptr).ok());
            for (int64_t p = 0; p < 24; ++p) {
                std::vector<int64_t> c = coords(kIn, p), src = c;
                for (int d = 0; d < 3; ++d) {
                    if ((mask >> d) & 1) src[d] = kSizes[d] - 1 - c[d];
                }
                ASSERT_EQ(at(out_b, out, c), at(in_b, in, src)) << "mask " << mask << " position " << p;
            }
        }
    }
}

TEST(Flip, RejectsBadMaskAndShapes) {
    Buffer in_b(DType::kFloat32, 6), out_b(DType::kFloat32, 6);
    EXPECT_FALSE(flip(out_b.view({2, 3}), in_b.view({2, 3}), 4, nullptr).ok());
    EXPECT_FALSE(flip(out_b.view({3, 2}), in_b.view({2, 3}), 1, nullptr).ok());
}

TEST(Roll, NegativeLargeAndZeroShiftsOnEveryDim) {
    for (DType t : {DType::kFloat32, DType::kInt8, DType::kBool}) {
        Buffer in_b(t, iota_values(24));
        TensorView in = in_b.view(kIn, kInStrides);
        for (int dim = 0; dim < 3; ++dim) {
            for (int64_t shift : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{-7}, int64_t{13}, int64_t{-12}}) {
                Buffer out_b(t, 24);
                TensorView out = out_b.view(kIn, {1, 8, 4});  // strided unlike in
                ASSERT_TRUE(roll(out, in, dim, shift, nullptr).ok());
                const int64_t n = kSizes[dim];
                for (int64_t p = 0; p < 24; ++p) {
                    std::vector<int64_t> c = coords(kIn, p), dst = c;
                    dst[dim] = (((c[dim] + shift) % n) + n) % n;
                    ASSERT_EQ(at(out_b, out, dst), at(in_b, in, c)) << "dim " << dim << " shift " << shift;
                }
            }
        }
    }
}

TEST(Roll, RejectsBadDim) {
    Buffer in_b(DType::kFloat32, 6), out_b(DType::kFloat32, 6);
    EXPECT_FALSE(roll(out_b.view({2, 3}), in_b.view({2, 3}), 2, 1, nullptr).ok());
    EXPECT_TRUE(roll(out_b.view({2, 0}), in_b.view({2, 0}), 1, 5, nullptr).ok()) << "empty is a no-op";
}

TEST(Reorder, ParallelMatchesSerial) {
    runtime::ThreadPool pool(4);
    const int64_t rows = 1200, cols = 1000;
    Buffer in_b(DType::kFloat32, iota_values(rows * cols));
    TensorView in = in_b.view({rows, cols}, {1, rows});  // transposed storage
    Buffer a(DType::kFloat32, rows * cols), b(DType::kFloat32, rows * cols);
    ASSERT_TRUE(flip(a.view({rows, cols}), in, 3, nullptr).ok());
    ASSERT_TRUE(flip(b.view({rows, cols}), in, 3, &pool).ok());
    EXPECT_EQ(a.bytes, b.bytes);
    ASSERT_TRUE(roll(a.view({rows, cols}), in, 1, -333, nullptr).ok());
    ASSERT_TRUE(roll(b.view({rows, cols}), in, 1, -333, &pool).ok());
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(a.get(0), in_b.get(333 * rows));
}

}  // namespace ember::kernels
