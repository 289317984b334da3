#include "kernels/index/scatter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "strided_test_util.h"

namespace ember::kernels {
namespace {

using strided_test::base_of;
using strided_test::Buffer;
using strided_test::offset_of;
using strided_test::same;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One update in double, stored (and so rounded) in the buffer's dtype after each step: the same
// result as the type's own arithmetic for the small values used here.
double apply(ScatterReduce r, double a, double b) {
    switch (r) {
        case ScatterReduce::kAssign: return b;
        case ScatterReduce::kSum: return a + b;
        case ScatterReduce::kProd: return a * b;
        case ScatterReduce::kAmax: return std::isnan(b) || std::isnan(a) ? (std::isnan(b) ? b : a) : std::max(a, b);
        case ScatterReduce::kAmin: return std::isnan(b) || std::isnan(a) ? (std::isnan(b) ? b : a) : std::min(a, b);
    }
    return 0;
}

void ref_scatter(Buffer& out_b, const TensorView& out, const Buffer& idx_b, const TensorView& index,
                 const Buffer& src_b, const TensorView& src, int dim, ScatterReduce r) {
    for (int64_t p = 0; p < index.numel(); ++p) {
        const int64_t j = static_cast<int64_t>(idx_b.get(base_of(idx_b, index) + offset_of(index, p)));
        // p's coordinates are index's; src may be larger, so it is addressed by them too.
        int64_t o = base_of(out_b, out), s = base_of(src_b, src), rem = p;
        for (int d = index.ndim - 1; d >= 0; --d) {
            const int64_t c = rem % index.sizes[d];
            rem /= index.sizes[d];
            o += (d == dim ? j : c) * out.strides[d];
            s += c * src.strides[d];
        }
        out_b.set(o, apply(r, out_b.get(o), src_b.get(s)));
    }
}

std::vector<double> small_values(DType t, size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int> dist(-3, 3);
    std::vector<double> v(n);
    for (auto& x : v) {
        const int d = dist(gen);
        x = t == DType::kBool ? (d > 0) : t == DType::kUInt8 ? d + 3 : strided_test::is_floating(t) ? d * 0.75 : d;
    }
    return v;
}

Buffer random_index(std::vector<int64_t> sizes, int64_t limit, unsigned seed) {
    int64_t n = 1;
    for (auto s : sizes) n *= s;
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int64_t> dist(0, limit - 1);
    std::vector<double> v(n);
    for (auto& x : v) x = static_cast<double>(dist(gen));
    return Buffer(DType::kInt64, v);
}

constexpr ScatterReduce kReduces[] = {ScatterReduce::kAssign, ScatterReduce::kSum, ScatterReduce::kProd,
                                      ScatterReduce::kAmax, ScatterReduce::kAmin};

}  // namespace

TEST(Scatter, EveryReduceAndDimMatchesReference) {
    const std::vector<int64_t> out_sizes = {4, 5, 3};
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32, DType::kInt64, DType::kBool}) {
        for (int dim = 0; dim < 3; ++dim) {
            // index is smaller than out in the other dims and longer along dim (duplicates);
            // src is larger than index. out is stored transposed.
            std::vector<int64_t> idx_sizes = {3, 4, 2};
            idx_sizes[dim] = 7;
            Buffer index_b = random_index(idx_sizes, out_sizes[dim], 100 + dim);
            TensorView index = index_b.view(idx_sizes);
            const std::vector<int64_t> src_sizes = {idx_sizes[0] + 1, idx_sizes[1] + 2, idx_sizes[2] + 1};
            Buffer src_b(t, small_values(t, src_sizes[0] * src_sizes[1] * src_sizes[2], 7));
            TensorView src = src_b.view(src_sizes);
            for (ScatterReduce r : kReduces) {
                Buffer got_b(t, small_values(t, 60, 3 + dim));
                Buffer want_b = got_b;
                TensorView out = got_b.view(out_sizes, {1, 12, 4}), want = want_b.view(out_sizes, {1, 12, 4});
                ASSERT_TRUE(scatter(out, index, src, dim, r, nullptr).ok());
                ref_scatter(want_b, want, index_b, index, src_b, src, dim, r);
                for (int64_t i = 0; i < 60; ++i) {
                    ASSERT_TRUE(same(got_b.get(i), want_b.get(i)))
                        << dtype_name(t) << " dim " << dim << " reduce " << static_cast<int>(r) << " at " << i;
                }
            }
        }
    }
}

TEST(Scatter, ScalarSourceWithZeroStrides) {
    Buffer out_b(DType::kFloat32, std::vector<double>(12, 1.0));
    Buffer index_b(DType::kInt64, {2, 0, 2, 1, 1, 1});
    Buffer value(DType::kFloat32, {2.5});
    TensorView index = index_b.view({2, 3});
    TensorView src = value.view({2, 3}, {0, 0});
    ASSERT_TRUE(scatter(out_b.view({3, 4}), index, src, 0, ScatterReduce::kSum, nullptr).ok());
    // Column c gets one 2.5 at row index[r][c] for each of the 2 index rows.
    const std::vector<double> want = {1, 3.5, 1, 1, 3.5, 3.5, 3.5, 1, 3.5, 1, 3.5, 1};
    for (int i = 0; i < 12; ++i) EXPECT_EQ(out_b.get(i), want[i]) << i;
}

TEST(Scatter, AmaxPropagatesNaNFromEitherSide) {
    Buffer out_b(DType::kFloat32, {kNaN, 1, 1});
    Buffer index_b(DType::kInt64, {0, 1, 2});
    Buffer src_b(DType::kFloat32, {5, kNaN, 0});
    ASSERT_TRUE(scatter(out_b.view({3}), index_b.view({3}), src_b.view({3}), 0, ScatterReduce::kAmax, nullptr).ok());
    EXPECT_TRUE(std::isnan(out_b.get(0)));
    EXPECT_TRUE(std::isnan(out_b.get(1)));
    EXPECT_EQ(out_b.get(2), 1);
}

TEST(Scatter, ZeroDim) {
    Buffer out_b(DType::kInt64, {4}), index_b(DType::kInt64, {0}), src_b(DType::kInt64, {9});
    ASSERT_TRUE(scatter(out_b.view({}), index_b.view({}), src_b.view({}), 0, ScatterReduce::kSum, nullptr).ok());
    EXPECT_EQ(out_b.get(0), 13);
}

TEST(Scatter, OutOfBoundsIndexWritesNothing) {
    for (double bad : {3.0, -1.0}) {
        Buffer out_b(DType::kFloat32, std::vector<double>(6, 7.0));
        Buffer index_b(DType::kInt64, {0, 1, 2, 0, bad, 1});
        Buffer src_b(DType::kFloat32, std::vector<double>(6, 1.0));
        Status st = scatter(out_b.view({3, 2}), index_b.view({3, 2}), src_b.view({3, 2}), 0, ScatterReduce::kAssign, nullptr);
        ASSERT_FALSE(st.ok());
        EXPECT_NE(st.message().find("index out of bounds"), std::string::npos) << st.message();
        for (int i = 0; i < 6; ++i) EXPECT_EQ(out_b.get(i), 7.0);
    }
}

TEST(Scatter, ParallelMatchesSerial) {
    runtime::ThreadPool pool(4);
    const int64_t rows = 2000, len = 300, cols = 50;  // lines of 300 along dim 1: several chunks
    Buffer index_b = random_index({rows, len}, cols, 5);
    std::mt19937 gen(9);
    std::uniform_real_distribution<double> dist(-1, 1);
    std::vector<double> src(rows * len);
    for (auto& x : src) x = dist(gen);
    Buffer src_b(DType::kFloat32, src);
    Buffer serial(DType::kFloat32, rows * cols), parallel(DType::kFloat32, rows * cols);
    for (ScatterReduce r : {ScatterReduce::kSum, ScatterReduce::kAssign}) {
        ASSERT_TRUE(scatter(serial.view({rows, cols}), index_b.view({rows, len}), src_b.view({rows, len}), 1, r, nullptr).ok());
        ASSERT_TRUE(scatter(parallel.view({rows, cols}), index_b.view({rows, len}), src_b.view({rows, len}), 1, r, &pool).ok());
        EXPECT_EQ(serial.bytes, parallel.bytes);
    }
}

namespace {

void ref_put_rows(Buffer& out_b, const TensorView& out, const std::vector<int64_t>& index, const Buffer& val_b,
                  const TensorView& values, bool accumulate) {
    const int64_t n = out.sizes[1];
    for (int64_t o = 0; o < out.sizes[0]; ++o) {
        for (size_t i = 0; i < index.size(); ++i) {
            const int64_t row = index[i] < 0 ? index[i] + n : index[i];
            for (int64_t k = 0; k < out.sizes[2]; ++k) {
                const int64_t dst = base_of(out_b, out) + o * out.strides[0] + row * out.strides[1] + k * out.strides[2];
                const double v = val_b.get(base_of(val_b, values) + o * values.strides[0] +
                                           static_cast<int64_t>(i) * values.strides[1] + k * values.strides[2]);
                out_b.set(dst, accumulate ? out_b.get(dst) + v : v);
            }
        }
    }
}

Buffer index_buffer(const std::vector<int64_t>& index) {
    return Buffer(DType::kInt64, std::vector<double>(index.begin(), index.end()));
}

}  // namespace

TEST(IndexPutRows, DuplicatesNegativesAndBroadcast) {
    const std::vector<int64_t> index = {1, -1, 1, 0, 5, -6, 3};  // -6 wraps to 0, duplicates of 0 and 1
    const int64_t outer = 2, n = 6, inner = 3, m = static_cast<int64_t>(index.size());
    Buffer index_b = index_buffer(index);
    Buffer full(DType::kFloat32, small_values(DType::kFloat32, outer * m * inner, 4));
    Buffer row(DType::kFloat32, {0.5, -1.5, 2});
    struct Case {
        Buffer* b;
        TensorView v;
    } cases[] = {{&full, full.view({outer, m, inner}, {1, inner * outer, outer})},  // strided
                 {&row, row.view({outer, m, inner}, {0, 0, 1})}};                   // broadcast
    for (auto& c : cases) {
        for (bool accumulate : {false, true}) {
            Buffer got_b(DType::kFloat32, small_values(DType::kFloat32, outer * n * inner, 2));
            Buffer want_b = got_b;
            ASSERT_TRUE(index_put_rows(got_b.view({outer, n, inner}), index_b.view({m}), c.v, accumulate, nullptr).ok());
            ref_put_rows(want_b, want_b.view({outer, n, inner}), index, *c.b, c.v, accumulate);
            EXPECT_EQ(got_b.bytes, want_b.bytes) << "accumulate " << accumulate;
        }
    }
}

TEST(IndexPutRows, IntegerAccumulateAndBool) {
    Buffer out_b(DType::kInt64, {10, 20, 30});
    Buffer index_b = index_buffer({2, 2, 0});
    Buffer val_b(DType::kInt64, {1, 2, 3});
    ASSERT_TRUE(index_put_rows(out_b.view({1, 3, 1}), index_b.view({3}), val_b.view({1, 3, 1}), true, nullptr).ok());
    EXPECT_EQ(out_b.get(0), 13);
    EXPECT_EQ(out_b.get(1), 20);
    EXPECT_EQ(out_b.get(2), 33);
    Buffer flags(DType::kBool, {0, 1}), set(DType::kBool, {1, 0});
    ASSERT_TRUE(index_put_rows(flags.view({1, 2, 1}), index_buffer({0, 0}).view({2}), set.view({1, 2, 1}), false, nullptr).ok());
    EXPECT_EQ(flags.get(0), 0) << "the last write wins";
}

TEST(IndexPutRows, OutOfRangeIndexWritesNothing) {
    for (int64_t bad : {int64_t{6}, int64_t{-7}}) {
        Buffer out_b(DType::kFloat32, std::vector<double>(6, 7.0));
        Buffer index_b = index_buffer({0, bad});
        Buffer val_b(DType::kFloat32, {1, 2});
        Status st = index_put_rows(out_b.view({1, 6, 1}), index_b.view({2}), val_b.view({1, 2, 1}), true, nullptr);
        ASSERT_FALSE(st.ok());
        EXPECT_NE(st.message().find("index " + std::to_string(bad) + " is out of bounds for dimension with size 6"),
                  std::string::npos)
            << st.message();
        for (int i = 0; i < 6; ++i) EXPECT_EQ(out_b.get(i), 7.0);
    }
}

TEST(IndexPutRows, ParallelMatchesSerial) {
    runtime::ThreadPool pool(4);
    const int64_t outer = 4, n = 100, inner = 300, m = 1000;  // 1200 columns of 1000 updates: several chunks
    std::mt19937 gen(1);
    std::uniform_int_distribution<int64_t> pick(-n, n - 1);
    std::vector<int64_t> index(m);
    for (auto& i : index) i = pick(gen);
    Buffer index_b = index_buffer(index);
    Buffer val_b(DType::kFloat32, small_values(DType::kFloat32, outer * m * inner, 8));
    for (bool accumulate : {false, true}) {
        Buffer serial(DType::kFloat32, outer * n * inner), parallel(DType::kFloat32, outer * n * inner);
        ASSERT_TRUE(index_put_rows(serial.view({outer, n, inner}), index_b.view({m}), val_b.view({outer, m, inner}), accumulate, nullptr).ok());
        ASSERT_TRUE(index_put_rows(parallel.view({outer, n, inner}), index_b.view({m}), val_b.view({outer, m, inner}), accumulate, &pool).ok());
        EXPECT_EQ(serial.bytes, parallel.bytes);
    }
}

}  // namespace ember::kernels
