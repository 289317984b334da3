#include "kernels/index/select_mask.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "strided_test_util.h"

namespace ember::kernels {
namespace {

using strided_test::base_of;
using strided_test::Buffer;
using strided_test::offset_of;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// About a third zeros (and some -0.0 and NaN for floats).
std::vector<double> sparse_values(size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> dist(0, 8);
    std::vector<double> v(n);
    for (auto& x : v) {
        const int d = dist(gen);
        x = d < 2 ? 0.0 : d == 2 ? -0.0 : d == 3 ? kNaN : d - 5;
    }
    return v;
}

bool nonzero_value(double x) { return x != 0; }  // NaN != 0 holds

int64_t ref_count(const Buffer& b, const TensorView& v) {
    int64_t c = 0;
    for (int64_t p = 0; p < v.numel(); ++p) c += nonzero_value(b.get(base_of(b, v) + offset_of(v, p)));
    return c;
}

}  // namespace

TEST(CountNonzero, NaNCountsAndNegativeZeroDoesNot) {
    for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
        Buffer b(t, {0.0, -0.0, kNaN, 1, -2, 0.0});
        auto n = count_nonzero(b.view({6}), nullptr);
        ASSERT_TRUE(n.ok());
        EXPECT_EQ(*n, 3) << dtype_name(t);
    }
    Buffer flags(DType::kBool, {1, 0, 1});
    EXPECT_EQ(*count_nonzero(flags.view({3}), nullptr), 2);
    Buffer scalar(DType::kInt32, {0, 5});
    EXPECT_EQ(*count_nonzero(scalar.view({}), nullptr), 0);
    EXPECT_EQ(*count_nonzero(scalar.view({}, {}, 1), nullptr), 1);
    EXPECT_EQ(*count_nonzero(scalar.view({4, 3}, {0, 0}, 1), nullptr), 12) << "zero strides count every position";
    std::vector<float> complex = {0, 0, 0, 1, 2, 0, -0.f, 0};  // (re, im) pairs
    TensorView c;
    c.data = complex.data();
    c.dtype = DType::kComplex64;
    c.ndim = 1;
    c.sizes[0] = 4;
    c.strides[0] = 1;
    EXPECT_EQ(*count_nonzero(c, nullptr), 2);
}

TEST(Nonzero, StridedInputRowMajorCoordinates) {
    const std::vector<int64_t> sizes = {3, 4, 5};
    for (DType t : {DType::kFloat32, DType::kInt16, DType::kBFloat16}) {
        Buffer in_b(t, sparse_values(60, 4));
        TensorView in = in_b.view(sizes, {1, 15, 3});  // stored [4, 5, 3]
        const int64_t count = ref_count(in_b, in);
        ASSERT_EQ(*count_nonzero(in, nullptr), count);
        Buffer out_b(DType::kInt64, count * 3);
        TensorView out = out_b.view({count, 3}, {1, count});  // stored [3, count]
        ASSERT_TRUE(nonzero(out, in, nullptr).ok());
        int64_t row = 0;
        for (int64_t p = 0; p < 60; ++p) {
            if (!nonzero_value(in_b.get(offset_of(in, p)))) continue;
            const int64_t want[3] = {p / 20, p / 5 % 4, p % 5};
            for (int d = 0; d < 3; ++d) ASSERT_EQ(out_b.get(row + d * count), want[d]) << "row " << row;
            ++row;
        }
    }
}

TEST(Nonzero, ZeroDimAndWrongCount) {
    Buffer scalar(DType::kFloat32, {2.5});
    Buffer out_b(DType::kInt64, 1);
    EXPECT_TRUE(nonzero(out_b.view({1, 0}), scalar.view({}), nullptr).ok());
    EXPECT_FALSE(nonzero(out_b.view({0, 0}), scalar.view({}), nullptr).ok());
    Buffer in_b(DType::kInt32, {0, 1, 2});
    Buffer short_out(DType::kInt64, {-1});
    EXPECT_FALSE(nonzero(short_out.view({1, 1}), in_b.view({3}), nullptr).ok());
    EXPECT_EQ(short_out.get(0), -1) << "nothing written on error";
}

TEST(MaskedSelect, BroadcastMaskOverStridedInput) {
    const std::vector<int64_t> sizes = {3, 4, 5};
    Buffer in_b(DType::kFloat64, sparse_values(60, 2));
    TensorView in = in_b.view(sizes, {1, 15, 3});
    Buffer mask_b(DType::kBool, sparse_values(20, 9));  // [4, 5], broadcast over dim 0
    TensorView mask = mask_b.view(sizes, {0, 5, 1});
    const int64_t count = *count_nonzero(mask, nullptr);
    ASSERT_EQ(count, 3 * ref_count(mask_b, mask_b.view({20})));
    Buffer out_b(DType::kFloat64, 2 * count);
    TensorView out = out_b.view({count}, {2});
    ASSERT_TRUE(masked_select(out, in, mask, nullptr).ok());
    int64_t i = 0;
    for (int64_t p = 0; p < 60; ++p) {
        if (mask_b.get(offset_of(mask, p)) == 0) continue;
        const double want = in_b.get(offset_of(in, p)), got = out_b.get(2 * i++);
        ASSERT_TRUE(strided_test::same(got, want)) << p;
        ASSERT_EQ(std::signbit(got), std::signbit(want)) << p;
    }
    Buffer wrong(DType::kFloat64, count + 1);
    EXPECT_FALSE(masked_select(wrong.view({count + 1}), in, mask, nullptr).ok());
}

TEST(SelectMask, ParallelMatchesSerial) {
    runtime::ThreadPool pool(4);
    const int64_t rows = 1600, cols = 1000;  // about three ranges of the grain
    Buffer in_b(DType::kFloat32, sparse_values(rows * cols, 6));
    TensorView in = in_b.view({rows, cols}, {1, rows});
    Buffer mask_b(DType::kBool, rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) mask_b.set(i, (i * 7919) % 3 == 0);
    TensorView mask = mask_b.view({rows, cols});

    const int64_t count = *count_nonzero(in, nullptr);
    ASSERT_EQ(*count_nonzero(in, &pool), count);
    ASSERT_EQ(count, ref_count(in_b, in));
    Buffer s(DType::kInt64, count * 2), p(DType::kInt64, count * 2);
    ASSERT_TRUE(nonzero(s.view({count, 2}), in, nullptr).ok());
    ASSERT_TRUE(nonzero(p.view({count, 2}), in, &pool).ok());
    EXPECT_EQ(s.bytes, p.bytes);

    const int64_t selected = *count_nonzero(mask, &pool);
    Buffer ms(DType::kFloat32, selected), mp(DType::kFloat32, selected);
    ASSERT_TRUE(masked_select(ms.view({selected}), in, mask, nullptr).ok());
    ASSERT_TRUE(masked_select(mp.view({selected}), in, mask, &pool).ok());
    EXPECT_EQ(ms.bytes, mp.bytes);
}

}  // namespace ember::kernels
