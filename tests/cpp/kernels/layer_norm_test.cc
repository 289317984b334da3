#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/norm/norm.h"
#include "norm_test_util.h"

namespace ember::kernels {
namespace {

using norm_test::expect_near_all;
using norm_test::random_values;
using norm_test::Tensor;

constexpr double kEps = 1e-5;

struct Ref {
    std::vector<double> y, mean, rstd;
};

// w/b empty: no affine.
Ref ref_forward(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                int64_t rows, int64_t cols, double eps) {
    Ref ref{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(rows)};
    for (int64_t r = 0; r < rows; ++r) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < cols; ++c) m += x[r * cols + c];
        m /= cols;
        for (int64_t c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
        v /= cols;  // biased
        const double rstd = 1 / std::sqrt(v + eps);
        ref.mean[r] = m;
        ref.rstd[r] = rstd;
        for (int64_t c = 0; c < cols; ++c)
            ref.y[r * cols + c] = (x[r * cols + c] - m) * rstd * (w.empty() ? 1 : w[c]) + (b.empty() ? 0 : b[c]);
    }
    return ref;
}

struct RefGrad {
    std::vector<double> dx, dw, db;
};

RefGrad ref_backward(const std::vector<double>& g, const std::vector<double>& x, const std::vector<double>& mean,
                     const std::vector<double>& rstd, const std::vector<double>& w, int64_t rows, int64_t cols) {
    RefGrad ref{std::vector<double>(x.size()), std::vector<double>(cols), std::vector<double>(cols)};
    for (int64_t r = 0; r < rows; ++r) {
        double m1 = 0, m2 = 0;
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t i = r * cols + c;
            const double gw = g[i] * (w.empty() ? 1 : w[c]), xhat = (x[i] - mean[r]) * rstd[r];
            m1 += gw / cols;
            m2 += gw * xhat / cols;
            ref.dw[c] += g[i] * xhat;
            ref.db[c] += g[i];
        }
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t i = r * cols + c;
            const double gw = g[i] * (w.empty() ? 1 : w[c]), xhat = (x[i] - mean[r]) * rstd[r];
            ref.dx[i] = rstd[r] * (gw - m1 - xhat * m2);
        }
    }
    return ref;
}

// Random rows, one far from zero relative to its spread, and one constant row (variance 0).
std::vector<double> test_input(int64_t rows, int64_t cols, unsigned seed) {
    std::vector<double> x = random_values(rows * cols, -3, 3, seed);
    for (int64_t c = 0; c < cols; ++c) {
        x[(rows - 2) * cols + c] += 1000;
        x[(rows - 1) * cols + c] = 0.5;
    }
    return x;
}

DType stats_dtype(DType t) { return t == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32; }

void check_forward(DType t, bool affine, double tol) {
    const int64_t rows = 6, cols = 50;
    Tensor in(t, {rows, cols}, test_input(rows, cols, 1));
    Tensor w(t, {cols}, random_values(cols, 0.5, 1.5, 2)), b(t, {cols}, random_values(cols, -1, 1, 3));
    Tensor out(t, {rows, cols}, std::vector<double>(rows * cols, -9));
    Tensor mean(stats_dtype(t), {rows}, std::vector<double>(rows)), rstd(stats_dtype(t), {rows}, std::vector<double>(rows));
    ASSERT_TRUE(layer_norm(out.view(), mean.view(), rstd.view(), in.view(), affine ? w.view() : TensorView{},
                           affine ? b.view() : TensorView{}, kEps, nullptr).ok());
    std::vector<double> wv = affine ? w.values() : std::vector<double>{}, bv = affine ? b.values() : std::vector<double>{};
    Ref ref = ref_forward(in.values(), wv, bv, rows, cols, kEps);
    expect_near_all(mean.values(), ref.mean, tol, tol);
    expect_near_all(rstd.values(), ref.rstd, tol, 0);
    std::vector<double> y = out.values();
    for (int64_t r = 0; r < rows; ++r) {
        // y = x * rstd - mean * rstd (PyTorch's form) cancels when |mean| >> std.
        const double scale = 1 + std::fabs(ref.mean[r]) * ref.rstd[r];
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t i = r * cols + c;
            EXPECT_NEAR(y[i], ref.y[i], tol * scale + tol * std::fabs(ref.y[i])) << "row " << r << " col " << c;
        }
    }
    if (t != DType::kBFloat16)
        for (int64_t c = 0; c < cols; ++c)
            EXPECT_EQ(y[(rows - 1) * cols + c], affine ? bv[c] : 0.0) << "a constant row normalizes to exactly the bias";
}

}  // namespace

TEST(LayerNorm, Float32MatchesReference) {
    check_forward(DType::kFloat32, true, 2e-6);
    check_forward(DType::kFloat32, false, 2e-6);
}

TEST(LayerNorm, Float64MatchesReferenceTightly) {
    check_forward(DType::kFloat64, true, 1e-13);
    check_forward(DType::kFloat64, false, 1e-13);
}

TEST(LayerNorm, BFloat16StoresFloat32Stats) {
    // Stats are float32 and exact to float precision; the output pays one bfloat16 rounding
    // (relative 2^-9), amplified by the cancellation on the row far from zero.
    check_forward(DType::kBFloat16, true, 1.0 / 256);
    const int64_t rows = 6, cols = 50;
    Tensor in(DType::kBFloat16, {rows, cols}, test_input(rows, cols, 4));
    Tensor out(DType::kBFloat16, {rows, cols}, std::vector<double>(rows * cols));
    Tensor mean(DType::kFloat32, {rows}, std::vector<double>(rows)), rstd(DType::kFloat32, {rows}, std::vector<double>(rows));
    ASSERT_TRUE(layer_norm(out.view(), mean.view(), rstd.view(), in.view(), {}, {}, kEps, nullptr).ok());
    Ref ref = ref_forward(in.values(), {}, {}, rows, cols, kEps);
    expect_near_all(mean.values(), ref.mean, 1e-6, 1e-6);
    expect_near_all(rstd.values(), ref.rstd, 1e-5, 0);
}

TEST(LayerNorm, MixedDtypeWeightAndStridedRows) {
    // bfloat16 input with float32 weight/bias, rows padded to a stride of 64, float64 output.
    const int64_t rows = 3, cols = 40, stride = 64;
    Tensor padded(DType::kBFloat16, {rows, stride}, random_values(rows * stride, -2, 2, 9));
    TensorView in = padded.view();
    in.sizes[1] = cols;
    std::vector<double> pv = padded.values(), x;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) x.push_back(pv[r * stride + c]);
    Tensor w(DType::kFloat32, {cols}, random_values(cols, -1, 1, 10)), b(DType::kFloat32, {cols}, random_values(cols, -1, 1, 11));
    Tensor out(DType::kFloat64, {rows, cols}, std::vector<double>(rows * cols));
    Tensor mean(DType::kFloat32, {rows}, std::vector<double>(rows)), rstd(DType::kFloat32, {rows}, std::vector<double>(rows));
    ASSERT_TRUE(layer_norm(out.view(), mean.view(), rstd.view(), in, w.view(), b.view(), kEps, nullptr).ok());
    expect_near_all(out.values(), ref_forward(x, w.values(), b.values(), rows, cols, kEps).y, 1e-5, 1e-5);
}

TEST(LayerNormBackward, MatchesReferenceForEachDtype) {
    const int64_t rows = 7, cols = 45;
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
        for (bool affine : {true, false}) {
            Tensor in(t, {rows, cols}, test_input(rows, cols, 5));
            Tensor g(t, {rows, cols}, random_values(rows * cols, -1, 1, 6));
            Tensor w(t, {cols}, random_values(cols, 0.5, 1.5, 7));
            Tensor out(t, {rows, cols}, std::vector<double>(rows * cols));
            Tensor mean(stats_dtype(t), {rows}, std::vector<double>(rows)), rstd(stats_dtype(t), {rows}, std::vector<double>(rows));
            TensorView wv = affine ? w.view() : TensorView{};
            ASSERT_TRUE(layer_norm(out.view(), mean.view(), rstd.view(), in.view(), wv, {}, kEps, nullptr).ok());
            Tensor dx(t, {rows, cols}, std::vector<double>(rows * cols, 5));
            Tensor dw(t, {cols}, std::vector<double>(cols, 5)), db(t, {cols}, std::vector<double>(cols, 5));
            ASSERT_TRUE(layer_norm_backward(dx.view(), dw.view(), db.view(), g.view(), in.view(), mean.view(),
                                            rstd.view(), wv, nullptr).ok());
            RefGrad ref = ref_backward(g.values(), in.values(), mean.values(), rstd.values(),
                                       affine ? w.values() : std::vector<double>{}, rows, cols);
            const double tol = t == DType::kFloat64 ? 1e-12 : t == DType::kFloat32 ? 2e-5 : 2e-2;
            expect_near_all(dx.values(), ref.dx, tol, tol);
            expect_near_all(dw.values(), ref.dw, tol, tol);
            expect_near_all(db.values(), ref.db, tol, tol);
        }
    }
}

TEST(LayerNormBackward, SkipsOutputsWithoutData) {
    const int64_t rows = 4, cols = 19;
    Tensor in(DType::kFloat32, {rows, cols}, random_values(rows * cols, -1, 1, 12));
    Tensor g(DType::kFloat32, {rows, cols}, random_values(rows * cols, -1, 1, 13));
    Tensor mean(DType::kFloat32, {rows}, std::vector<double>(rows)), rstd(DType::kFloat32, {rows}, std::vector<double>(rows));
    Tensor out(DType::kFloat32, {rows, cols}, std::vector<double>(rows * cols));
    ASSERT_TRUE(layer_norm(out.view(), mean.view(), rstd.view(), in.view(), {}, {}, kEps, nullptr).ok());
    RefGrad ref = ref_backward(g.values(), in.values(), mean.values(), rstd.values(), {}, rows, cols);

    Tensor dx(DType::kFloat32, {rows, cols}, std::vector<double>(rows * cols));
    ASSERT_TRUE(layer_norm_backward(dx.view(), {}, {}, g.view(), in.view(), mean.view(), rstd.view(), {}, nullptr).ok());
    expect_near_all(dx.values(), ref.dx, 1e-5, 1e-5);
    Tensor db(DType::kFloat32, {cols}, std::vector<double>(cols));
    ASSERT_TRUE(layer_norm_backward({}, {}, db.view(), g.view(), in.view(), mean.view(), rstd.view(), {}, nullptr).ok());
    expect_near_all(db.values(), ref.db, 1e-6, 1e-6);
    EXPECT_TRUE(layer_norm_backward({}, {}, {}, g.view(), in.view(), mean.view(), rstd.view(), {}, nullptr).ok());
}

TEST(LayerNormBackward, GradInputMayOverwriteGradOutput) {
    const int64_t rows = 5, cols = 33;
    Tensor in(DType::kFloat32, {rows, cols}, random_values(rows * cols, -1, 1, 18));
    Tensor g(DType::kFloat32, {rows, cols}, random_values(rows * cols, -1, 1, 19));
    Tensor w(DType::kFloat32, {cols}, random_values(cols, 0.5, 1.5, 20));
    Tensor mean(DType::kFloat32, {rows}, std::vector<double>(rows)), rstd(DType::kFloat32, {rows}, std::vector<double>(rows));
    Tensor out(DType::kFloat32, {rows, cols}, std::vector<double>(rows * cols));
    ASSERT_TRUE(layer_norm(out.view(), mean.view(), rstd.view(), in.view(), w.view(), {}, kEps, nullptr).ok());
    RefGrad ref = ref_backward(g.values(), in.values(), mean.values(), rstd.values(), w.values(), rows, cols);
    Tensor dw(DType::kFloat32, {cols}, std::vector<double>(cols)), db(DType::kFloat32, {cols}, std::vector<double>(cols));
    ASSERT_TRUE(layer_norm_backward(g.view(), dw.view(), db.view(), g.view(), in.view(), mean.view(), rstd.view(),
                                    w.view(), nullptr).ok());
    expect_near_all(g.values(), ref.dx, 1e-5, 1e-5);
    expect_near_all(dw.values(), ref.dw, 1e-5, 1e-5);
    expect_near_all(db.values(), ref.db, 1e-5, 1e-5);
}

TEST(LayerNorm, ThreadPoolWithManyRowsMatchesSerialAndReference) {
    runtime::ThreadPool pool(4);
    const int64_t rows = 4000, cols = 96;
    Tensor in(DType::kFloat32, {rows, cols}, random_values(rows * cols, -2, 2, 14));
    Tensor g(DType::kFloat32, {rows, cols}, random_values(rows * cols, -1, 1, 15));
    Tensor w(DType::kFloat32, {cols}, random_values(cols, 0.5, 1.5, 16)), b(DType::kFloat32, {cols}, random_values(cols, -1, 1, 17));
    auto zeros = [](std::vector<int64_t> s, int64_t n) { return Tensor(DType::kFloat32, std::move(s), std::vector<double>(n)); };
    Tensor out_s = zeros({rows, cols}, rows * cols), out_p = zeros({rows, cols}, rows * cols);
    Tensor mean = zeros({rows}, rows), rstd = zeros({rows}, rows), mean_p = zeros({rows}, rows), rstd_p = zeros({rows}, rows);
    ASSERT_TRUE(layer_norm(out_s.view(), mean.view(), rstd.view(), in.view(), w.view(), b.view(), kEps, nullptr).ok());
    ASSERT_TRUE(layer_norm(out_p.view(), mean_p.view(), rstd_p.view(), in.view(), w.view(), b.view(), kEps, &pool).ok());
    EXPECT_EQ(out_s.bytes, out_p.bytes);
    EXPECT_EQ(rstd.bytes, rstd_p.bytes);

    Tensor dx_s = zeros({rows, cols}, rows * cols), dw_s = zeros({cols}, cols), db_s = zeros({cols}, cols);
    ASSERT_TRUE(layer_norm_backward(dx_s.view(), dw_s.view(), db_s.view(), g.view(), in.view(), mean.view(),
                                    rstd.view(), w.view(), nullptr).ok());
    RefGrad ref = ref_backward(g.values(), in.values(), mean.values(), rstd.values(), w.values(), rows, cols);
    for (int run = 0; run < 3; ++run) {
        Tensor dx = zeros({rows, cols}, rows * cols), dw = zeros({cols}, cols), db = zeros({cols}, cols);
        ASSERT_TRUE(layer_norm_backward(dx.view(), dw.view(), db.view(), g.view(), in.view(), mean.view(),
                                        rstd.view(), w.view(), &pool).ok());
        EXPECT_EQ(dx.bytes, dx_s.bytes) << "rows are independent of the split";
        // Column sums over 4000 rows: partial sums per thread are summed in a fixed order,
        // so they agree with the serial sums to double precision before the float rounding.
        expect_near_all(dw.values(), dw_s.values(), 1e-6, 0);
        expect_near_all(db.values(), db_s.values(), 1e-6, 0);
        expect_near_all(dw.values(), ref.dw, 1e-5, 1e-4);
        expect_near_all(db.values(), ref.db, 1e-5, 1e-4);
    }
}

TEST(LayerNorm, RejectsBadArguments) {
    Tensor in(DType::kFloat32, {2, 3}, std::vector<double>(6)), out(DType::kFloat32, {2, 3}, std::vector<double>(6));
    Tensor stats(DType::kFloat32, {2}, std::vector<double>(2)), wrong(DType::kFloat32, {4}, std::vector<double>(4));
    EXPECT_EQ(layer_norm(out.view(), stats.view(), stats.view(), in.view(), wrong.view(), {}, kEps, nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(layer_norm(out.view(), wrong.view(), stats.view(), in.view(), {}, {}, kEps, nullptr).code(),
              StatusCode::kInvalidArgument);
    Tensor bad_out(DType::kFloat32, {3, 2}, std::vector<double>(6));
    EXPECT_EQ(layer_norm(bad_out.view(), stats.view(), stats.view(), in.view(), {}, {}, kEps, nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(layer_norm_backward(out.view(), {}, {}, in.view(), in.view(), stats.view(), wrong.view(), {}, nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(layer_norm_backward(out.view(), wrong.view(), {}, in.view(), in.view(), stats.view(), stats.view(), {}, nullptr).code(),
              StatusCode::kInvalidArgument);
}

}  // namespace ember::kernels
