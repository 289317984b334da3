#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/norm/norm.h"
#include "norm_test_util.h"

namespace ember::kernels {
namespace {

using norm_test::expect_near_all;
using norm_test::random_values;
using norm_test::Tensor;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> ref_softmax(const std::vector<double>& x, int64_t rows, int64_t cols, bool log) {
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
        const double* xr = x.data() + r * cols;
        double m = -kInf;
        for (int64_t c = 0; c < cols; ++c) m = std::max(m, xr[c]);
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp(xr[c] - m);
        for (int64_t c = 0; c < cols; ++c)
            y[r * cols + c] = log ? xr[c] - m - std::log(s) : std::exp(xr[c] - m) / s;
    }
    return y;
}

std::vector<double> ref_softmax_backward(const std::vector<double>& g, const std::vector<double>& y,
                                         int64_t rows, int64_t cols, bool log) {
    std::vector<double> gi(g.size());
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += log ? g[r * cols + c] : g[r * cols + c] * y[r * cols + c];
        for (int64_t c = 0; c < cols; ++c) {
            const int64_t i = r * cols + c;
            gi[i] = log ? g[i] - std::exp(y[i]) * s : y[i] * (g[i] - s);
        }
    }
    return gi;
}

// Rows of moderate values, then a row near 1e4 and a row spread over thousands: without the
// max shift their exp would overflow.
std::vector<double> test_rows(int64_t cols) {
    std::vector<double> x = random_values(7 * cols, -4, 4, 7);
    for (int64_t c = 0; c < cols; ++c) {
        x[5 * cols + c] += 1e4;
        x[6 * cols + c] *= 1000;
    }
    return x;
}

void check_forward(DType t, bool log, double rel, double abs) {
    const int64_t rows = 7, cols = 37;
    Tensor in(t, {rows, cols}, test_rows(cols));
    Tensor out(t, {rows, cols}, std::vector<double>(rows * cols, -7));
    ASSERT_TRUE(softmax(out.view(), in.view(), log, nullptr).ok());
    std::vector<double> y = out.values();
    for (double v : y) ASSERT_FALSE(std::isnan(v)) << "large rows must not overflow";
    expect_near_all(y, ref_softmax(in.values(), rows, cols, log), rel, abs);
}

}  // namespace

TEST(Softmax, Float32MatchesReferenceIncludingLargeRows) {
    check_forward(DType::kFloat32, false, 1e-5, 1e-7);
    check_forward(DType::kFloat32, true, 1e-6, 1e-5);
}

TEST(Softmax, Float64MatchesReferenceTightly) {
    check_forward(DType::kFloat64, false, 1e-13, 1e-300);
    check_forward(DType::kFloat64, true, 1e-13, 1e-12);
}

TEST(Softmax, BFloat16ComputesInFloatAndRoundsOnce) {
    // The reference sees the bfloat16-rounded inputs; the only further error is the final
    // rounding to bfloat16 (relative 2^-8), plus the cancellation in x - max - lse for log.
    check_forward(DType::kBFloat16, false, 1.0 / 128, 1e-30);
    check_forward(DType::kBFloat16, true, 1.0 / 128, 1.0 / 16);
}

TEST(Softmax, NegativeInfinityEntriesAndFullyMaskedRow) {
    const int64_t cols = 20;
    std::vector<double> x = random_values(3 * cols, -2, 2, 3);
    x[2] = x[5] = x[19] = -kInf;                                   // row 0: a few masked
    for (int64_t c = 0; c < cols; ++c) x[cols + c] = -kInf;       // row 1: all masked
    for (int64_t c = 1; c < cols; ++c) x[2 * cols + c] = -kInf;   // row 2: one survivor
    for (bool log : {false, true}) {
        Tensor in(DType::kFloat32, {3, cols}, x), out(DType::kFloat32, {3, cols}, std::vector<double>(3 * cols));
        ASSERT_TRUE(softmax(out.view(), in.view(), log, nullptr).ok());
        std::vector<double> y = out.values();
        std::vector<double> want = ref_softmax(in.values(), 1, cols, log);
        for (int64_t c = 0; c < cols; ++c) {
            if (std::isinf(want[c])) EXPECT_EQ(y[c], -kInf);
            else EXPECT_NEAR(y[c], want[c], 1e-6) << c;
            EXPECT_TRUE(std::isnan(y[cols + c])) << "a fully -inf row is NaN, as in PyTorch";
        }
        EXPECT_EQ(y[2 * cols], log ? 0.0 : 1.0);
        EXPECT_EQ(y[2 * cols + 1], log ? -kInf : 0.0);
    }
}

TEST(Softmax, StridedRowsInPlaceAndConvertingOutput) {
    // Rows padded to a stride of 40; softmax computed in place over the padded buffer.
    const int64_t rows = 4, cols = 33, stride = 40;
    std::vector<float> buf(rows * stride, 123.f);
    std::vector<double> x = random_values(rows * cols, -3, 3, 11);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) buf[r * stride + c] = static_cast<float>(x[r * cols + c]);
    std::vector<double> xf(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) xf[r * cols + c] = buf[r * stride + c];
    TensorView v;
    v.data = buf.data();
    v.ndim = 2;
    v.sizes[0] = rows, v.sizes[1] = cols;
    v.strides[0] = stride, v.strides[1] = 1;
    // A float64 output of a float32 input: computed in float, widened on store.
    Tensor wide(DType::kFloat64, {rows, cols}, std::vector<double>(rows * cols));
    ASSERT_TRUE(softmax(wide.view(), v, true, nullptr).ok());
    ASSERT_TRUE(softmax(v, v, false, nullptr).ok());
    std::vector<double> want = ref_softmax(xf, rows, cols, false), want_log = ref_softmax(xf, rows, cols, true);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) EXPECT_NEAR(buf[r * stride + c], want[r * cols + c], 1e-6);
        for (int64_t c = cols; c < stride; ++c) EXPECT_EQ(buf[r * stride + c], 123.f) << "padding untouched";
    }
    expect_near_all(wide.values(), want_log, 1e-6, 1e-6);
}

TEST(SoftmaxBackward, MatchesReferenceForSoftmaxAndLogSoftmax) {
    const int64_t rows = 6, cols = 45;
    for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat64}) {
        for (bool log : {false, true}) {
            Tensor y(t, {rows, cols}, ref_softmax(random_values(rows * cols, -3, 3, 5), rows, cols, log));
            Tensor g(t, {rows, cols}, random_values(rows * cols, -1, 1, 6));
            Tensor gi(t, {rows, cols}, std::vector<double>(rows * cols));
            ASSERT_TRUE(softmax_backward(gi.view(), g.view(), y.view(), log, nullptr).ok());
            std::vector<double> want = ref_softmax_backward(g.values(), y.values(), rows, cols, log);
            const double tol = t == DType::kBFloat16 ? 2e-2 : t == DType::kFloat32 ? 2e-6 : 1e-13;
            expect_near_all(gi.values(), want, tol, tol);
        }
    }
}

TEST(SoftmaxBackward, InPlaceOverGradOutput) {
    const int64_t rows = 3, cols = 17;
    Tensor y(DType::kFloat32, {rows, cols}, ref_softmax(random_values(rows * cols, -3, 3, 1), rows, cols, true));
    Tensor g(DType::kFloat32, {rows, cols}, random_values(rows * cols, -1, 1, 2));
    std::vector<double> want = ref_softmax_backward(g.values(), y.values(), rows, cols, true);
    ASSERT_TRUE(softmax_backward(g.view(), g.view(), y.view(), true, nullptr).ok());
    expect_near_all(g.values(), want, 1e-6, 1e-6);
}

TEST(SoftmaxBackward, FloatExpIsWithinOneAndAHalfUlpEverywhere) {
    // Rows [x, 0] with grad [0, -1]: log_softmax backward returns g - exp(out) * sum(g) =
    // exp(x) exactly as the kernel evaluates it, for any x, not only log-probabilities.
    std::vector<double> xs = {-kInf, kInf, std::nan(""), 0, -0.0, -1e-30, 1e-30, -87.5, -103.9, -104.5,
                              88.72, 88.73, -109.9, -150};
    for (int i = 0; i <= 200000; ++i) xs.push_back(-110 + 199.0 * i / 200000);
    for (double& x : xs) x = static_cast<float>(x);  // the values the kernel sees
    const int64_t rows = static_cast<int64_t>(xs.size());
    std::vector<double> out(2 * rows), g(2 * rows);
    for (int64_t r = 0; r < rows; ++r) {
        out[2 * r] = xs[r];
        g[2 * r + 1] = -1;
    }
    Tensor y(DType::kFloat32, {rows, 2}, out), go(DType::kFloat32, {rows, 2}, g), gi(DType::kFloat32, {rows, 2}, g);
    ASSERT_TRUE(softmax_backward(gi.view(), go.view(), y.view(), true, nullptr).ok());
    std::vector<double> e = gi.values();
    for (int64_t r = 0; r < rows; ++r) {
        const double want = std::exp(xs[r]);
        const float wf = static_cast<float>(want);
        if (std::isnan(want) || std::isinf(wf)) {
            EXPECT_TRUE(std::isnan(want) ? std::isnan(e[2 * r]) : e[2 * r] == kInf) << "exp(" << xs[r] << ")";
            continue;
        }
        const double ulp = std::nextafter(wf, std::numeric_limits<float>::infinity()) - wf;
        ASSERT_LE(std::fabs(e[2 * r] - want), 1.5 * ulp) << "exp(" << xs[r] << ") = " << e[2 * r] << ", want " << want;
    }
    EXPECT_EQ(e[0], 0.0) << "exp(-inf) is exactly 0";
    EXPECT_EQ(e[6], 1.0);
}

TEST(Softmax, ThreadPoolWithManyRowsMatchesSerial) {
    runtime::ThreadPool pool(4);
    const int64_t rows = 6000, cols = 29;
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        Tensor in(t, {rows, cols}, random_values(rows * cols, -10, 10, 21));
        Tensor serial(t, {rows, cols}, std::vector<double>(rows * cols));
        Tensor parallel(t, {rows, cols}, std::vector<double>(rows * cols));
        ASSERT_TRUE(softmax(serial.view(), in.view(), false, nullptr).ok());
        ASSERT_TRUE(softmax(parallel.view(), in.view(), false, &pool).ok());
        EXPECT_EQ(serial.bytes, parallel.bytes) << "each row is computed the same way on any thread";
        expect_near_all(parallel.values(), ref_softmax(in.values(), rows, cols, false), t == DType::kFloat32 ? 1e-5 : 1.0 / 128, 1e-30);

        Tensor g(t, {rows, cols}, random_values(rows * cols, -1, 1, 22));
        Tensor gs(t, {rows, cols}, std::vector<double>(rows * cols));
        Tensor gp(t, {rows, cols}, std::vector<double>(rows * cols));
        ASSERT_TRUE(softmax_backward(gs.view(), g.view(), parallel.view(), false, nullptr).ok());
        ASSERT_TRUE(softmax_backward(gp.view(), g.view(), parallel.view(), false, &pool).ok());
        EXPECT_EQ(gs.bytes, gp.bytes);
    }
}

TEST(Softmax, RejectsBadArguments) {
    Tensor a(DType::kFloat32, {2, 3}, std::vector<double>(6)), b(DType::kFloat32, {3, 2}, std::vector<double>(6));
    EXPECT_EQ(softmax(b.view(), a.view(), false, nullptr).code(), StatusCode::kInvalidArgument);
    Tensor i(DType::kInt32, {2, 3}, std::vector<double>(6));
    EXPECT_EQ(softmax(a.view(), i.view(), false, nullptr).code(), StatusCode::kInvalidArgument);
    TensorView t = a.view();
    std::swap(t.sizes[0], t.sizes[1]);
    std::swap(t.strides[0], t.strides[1]);  // transposed: last dimension not contiguous
    EXPECT_EQ(softmax(b.view(), t, false, nullptr).code(), StatusCode::kInvalidArgument);
    Tensor one_d(DType::kFloat32, {6}, std::vector<double>(6));
    EXPECT_EQ(softmax(one_d.view(), one_d.view(), true, nullptr).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(softmax_backward(a.view(), b.view(), a.view(), false, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST(Softmax, EmptyTensorsAreNoOps) {
    Tensor a(DType::kFloat32, {0, 5}, {}), b(DType::kFloat32, {3, 0}, {});
    EXPECT_TRUE(softmax(a.view(), a.view(), false, nullptr).ok());
    EXPECT_TRUE(softmax(b.view(), b.view(), true, nullptr).ok());
    EXPECT_TRUE(softmax_backward(b.view(), b.view(), b.view(), true, nullptr).ok());
}

}  // namespace ember::kernels
