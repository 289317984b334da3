#include "kernels/sort/sort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "strided_test_util.h"

namespace ember::kernels {
namespace {

using strided_test::base_of;
using strided_test::Buffer;
using strided_test::is_floating;
using strided_test::kRealTypes;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// PyTorch's order: NaN above everything.
bool less_nan(double a, double b) { return !std::isnan(a) && (std::isnan(b) || a < b); }

// Positions of slice (o, :, k) of a [outer, n, inner] view in stable sorted order.
std::vector<int64_t> ref_order(const Buffer& b, const TensorView& v, int64_t o, int64_t k, bool descending) {
    const int64_t n = v.sizes[1], base = base_of(b, v) + o * v.strides[0] + k * v.strides[2];
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    auto at = [&](int64_t i) { return b.get(base + i * v.strides[1]); };
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        return descending ? less_nan(at(y), at(x)) : less_nan(at(x), at(y));
    });
    return order;
}

int64_t off3(const Buffer& b, const TensorView& v, int64_t o, int64_t r, int64_t k) {
    return base_of(b, v) + o * v.strides[0] + r * v.strides[1] + k * v.strides[2];
}

// Values come from a small set so that ties are common; floats add NaN, infinities and -0.0.
std::vector<double> tie_heavy_values(DType t, size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> pick(0, 11);
    const double floats[] = {-2.5, -1, -0.0, 0.0, 0.5, 1, 3, kNaN, kInf, -kInf, 1, 0.5};
    std::vector<double> v(n);
    for (auto& x : v) {
        const int p = pick(gen);
        if (t == DType::kBool) x = p % 2;
        else if (t == DType::kUInt8) x = p * 20;
        else if (is_floating(t)) x = floats[p];
        else x = p - 6;
    }
    return v;
}

// Checks a sort or topk result (first `count` of each slice) against the stable reference.
void expect_matches(const Buffer& in_b, const TensorView& in, const Buffer& val_b, const TensorView& val,
                    const Buffer& idx_b, const TensorView& idx, bool descending, int64_t count, bool ordered) {
    for (int64_t o = 0; o < in.sizes[0]; ++o) {
        for (int64_t k = 0; k < in.sizes[2]; ++k) {
            std::vector<int64_t> want = ref_order(in_b, in, o, k, descending);
            want.resize(count);
            std::vector<int64_t> got(count);
            for (int64_t r = 0; r < count; ++r) {
                got[r] = static_cast<int64_t>(idx_b.get(off3(idx_b, idx, o, r, k)));
                ASSERT_GE(got[r], 0);
                ASSERT_LT(got[r], in.sizes[1]);
                EXPECT_EQ(val_b.raw(off3(val_b, val, o, r, k)), in_b.raw(off3(in_b, in, o, got[r], k)))
                    << "value at rank " << r << " is not the input element its index names";
            }
            if (!ordered) {
                std::sort(want.begin(), want.end());
                std::sort(got.begin(), got.end());
            }
            EXPECT_EQ(got, want) << "slice (" << o << ", " << k << ") of " << dtype_name(in.dtype);
        }
    }
}

}  // namespace

TEST(Sort, StridedFloatWithNaNTiesAndSignedZero) {
    const int64_t outer = 2, n = 9, inner = 3;
    // Input stored [n, outer, inner]; outputs stored [inner, outer, n]: nothing is contiguous along n.
    Buffer in_b(DType::kFloat32, {1, kNaN, -0.0, 0.0, 2, kInf, 1, -kInf, kNaN, 0.0, -0.0, 3, 3, 3, -1, kNaN, 0.5, 2,
                                  -1, 7, 7, kNaN, 0, 1, 2, 3, 4, 5, 6, 7, -7, -6, -5, -4, -3, -2, 0, 0, 0, kNaN, 1,
                                  kNaN, 2, 2, -0.0, 1, 1, 1, 8, 9, -9, kInf, kInf, -kInf});
    ASSERT_EQ(in_b.size(), outer * n * inner);
    TensorView in = in_b.view({outer, n, inner}, {inner, outer * inner, 1});
    for (bool descending : {false, true}) {
        Buffer val_b(DType::kFloat32, outer * n * inner), idx_b(DType::kInt64, outer * n * inner);
        TensorView val = val_b.view({outer, n, inner}, {n, 1, outer * n});
        TensorView idx = idx_b.view({outer, n, inner}, {n, 1, outer * n});
        ASSERT_TRUE(sort(val, idx, in, descending, true, nullptr).ok());
        expect_matches(in_b, in, val_b, val, idx_b, idx, descending, n, true);
    }
}

TEST(Sort, EveryRealDtypeIsStableBothWays) {
    const int64_t outer = 3, n = 17, inner = 2;
    for (DType t : kRealTypes) {
        Buffer in_b(t, tie_heavy_values(t, outer * n * inner, 7));
        TensorView in = in_b.view({outer, n, inner});
        for (bool descending : {false, true}) {
            Buffer val_b(t, outer * n * inner), idx_b(DType::kInt64, outer * n * inner);
            TensorView val = val_b.view({outer, n, inner}), idx = idx_b.view({outer, n, inner});
            ASSERT_TRUE(sort(val, idx, in, descending, false, nullptr).ok());
            expect_matches(in_b, in, val_b, val, idx_b, idx, descending, n, true);
        }
    }
}

TEST(Sort, InPlaceOverTheInput) {
    Buffer b(DType::kInt32, {5, -1, 3, 3, 0, 9, -4, 2});
    const Buffer before = b;
    Buffer idx_b(DType::kInt64, 8);
    TensorView v = b.view({2, 4, 1});
    ASSERT_TRUE(sort(v, idx_b.view({2, 4, 1}), v, false, true, nullptr).ok());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(b.get(i), (std::vector<double>{-1, 3, 3, 5, -4, 0, 2, 9})[i]);
    EXPECT_EQ(idx_b.get(1), 2);
    EXPECT_EQ(idx_b.get(2), 3);
    expect_matches(before, before.view({2, 4, 1}), b, v, idx_b, idx_b.view({2, 4, 1}), false, 4, true);
}

TEST(Sort, RejectsBadViews) {
    Buffer in_b(DType::kFloat32, 6), val_b(DType::kFloat32, 6), idx_b(DType::kInt32, 6);
    EXPECT_FALSE(sort(val_b.view({1, 6, 1}), idx_b.view({1, 6, 1}), in_b.view({1, 6, 1}), false, true, nullptr).ok());
    Buffer idx64(DType::kInt64, 6);
    EXPECT_FALSE(sort(val_b.view({1, 5, 1}), idx64.view({1, 5, 1}), in_b.view({1, 6, 1}), false, true, nullptr).ok());
    EXPECT_FALSE(sort(val_b.view({6}), idx64.view({6}), in_b.view({6}), false, true, nullptr).ok());
}

TEST(Topk, LargestAndSmallestWithNaNAndTies) {
    const int64_t outer = 2, n = 13, inner = 3;
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt16, DType::kBool}) {
        Buffer in_b(t, tie_heavy_values(t, outer * n * inner, 11));
        TensorView in = in_b.view({outer, n, inner}, {1, outer * inner, outer});  // n outermost in memory
        for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{5}, n}) {
            for (bool largest : {true, false}) {
                for (bool sorted : {true, false}) {
                    Buffer val_b(t, outer * k * inner), idx_b(DType::kInt64, outer * k * inner);
                    TensorView val = val_b.view({outer, k, inner}), idx = idx_b.view({outer, k, inner});
                    ASSERT_TRUE(topk(val, idx, in, k, largest, sorted, nullptr).ok());
                    expect_matches(in_b, in, val_b, val, idx_b, idx, largest, k, sorted);
                }
            }
        }
    }
}

TEST(Topk, KOutOfRange) {
    Buffer in_b(DType::kFloat32, 4), val_b(DType::kFloat32, 8), idx_b(DType::kInt64, 8);
    for (int64_t k : {int64_t{-1}, int64_t{5}}) {
        Status st = topk(val_b.view({1, 5, 1}), idx_b.view({1, 5, 1}), in_b.view({1, 4, 1}), k, true, true, nullptr);
        EXPECT_FALSE(st.ok());
        EXPECT_NE(st.message().find("selected index k out of range"), std::string::npos) << st.message();
    }
}

TEST(Sort, ParallelMatchesSerial) {
    runtime::ThreadPool pool(4);
    const int64_t outer = 3000, n = 64, inner = 2;  // 6000 slices, several chunks of the pool
    std::mt19937 gen(3);
    std::uniform_int_distribution<int> dist(-50, 50);
    std::vector<double> values(outer * n * inner);
    for (auto& x : values) x = dist(gen) == 0 ? kNaN : dist(gen) / 4.0;
    Buffer in_b(DType::kFloat32, values);
    TensorView in = in_b.view({outer, n, inner});
    Buffer v1(DType::kFloat32, values.size()), i1(DType::kInt64, values.size());
    Buffer v2(DType::kFloat32, values.size()), i2(DType::kInt64, values.size());
    ASSERT_TRUE(sort(v1.view({outer, n, inner}), i1.view({outer, n, inner}), in, true, true, nullptr).ok());
    ASSERT_TRUE(sort(v2.view({outer, n, inner}), i2.view({outer, n, inner}), in, true, true, &pool).ok());
    EXPECT_EQ(v1.bytes, v2.bytes);
    EXPECT_EQ(i1.bytes, i2.bytes);
    expect_matches(in_b, in, v2, v2.view({outer, n, inner}), i2, i2.view({outer, n, inner}), true, n, true);

    const int64_t k = 10;
    Buffer tv1(DType::kFloat32, outer * k * inner), ti1(DType::kInt64, outer * k * inner);
    Buffer tv2(DType::kFloat32, outer * k * inner), ti2(DType::kInt64, outer * k * inner);
    ASSERT_TRUE(topk(tv1.view({outer, k, inner}), ti1.view({outer, k, inner}), in, k, false, true, nullptr).ok());
    ASSERT_TRUE(topk(tv2.view({outer, k, inner}), ti2.view({outer, k, inner}), in, k, false, true, &pool).ok());
    EXPECT_EQ(tv1.bytes, tv2.bytes);
    EXPECT_EQ(ti1.bytes, ti2.bytes);
}

}  // namespace ember::kernels
