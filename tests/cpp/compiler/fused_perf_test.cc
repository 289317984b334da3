// Timings of the generated kernels behind the demo model's slow steps (RMSNorm weight-gradient
// column sum, masked softmax over attention scores, RMSNorm forward). Each test checks the
// result against plain loops and prints µs per run; nothing asserts on time, which depends on
// the machine. Compare runs with --gtest_filter='CompilerPerf.*'.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "compiler_test_util.h"
#include "runtime/thread_pool.h"

namespace ember::compiler::test {
namespace {

// Median-free but warm: best of several batches, so scheduler noise does not dominate.
template <typename F>
double best_us(F&& f) {
    for (int i = 0; i < 20; ++i) f();
    double best = 1e30;
    for (int rep = 0; rep < 7; ++rep) {
        const int n = 50;
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) f();
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
        best = std::min(best, us);
    }
    return best;
}

TEST(CompilerPerf, ColumnSumOverLeadingDims) {
    EMBER_REQUIRE_LLVM();
    const int64_t B = 8, T = 64, H = 128;
    Graph g;
    const int a = g.input(DType::kFloat32, {B, T, H});
    const int b = g.input(DType::kFloat32, {B, T, H});
    g.mark_output(g.reduce(Op::kSum, g.add(Op::kMul, {a, b}), {0, 1}, false, "norm.py:9"));
    auto exe = compile_ok(g);
    ASSERT_TRUE(exe);
    auto as = random_floats(B * T * H, -1, 1, 1), bs = random_floats(B * T * H, -1, 1, 2);
    std::vector<float> got(H), want(H, 0.f);
    void* in[] = {as.data(), bs.data()};
    void* o[] = {got.data()};
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(exe->run(in, o, &pool).ok());
    std::vector<double> acc(H, 0.0);
    for (int64_t r = 0; r < B * T; ++r)
        for (int64_t c = 0; c < H; ++c) acc[c] += static_cast<double>(as[r * H + c]) * bs[r * H + c];
    for (int64_t c = 0; c < H; ++c) want[c] = static_cast<float>(acc[c]);
    expect_close(got, want, 1e-4f, 1e-4f);
    std::printf("[ perf ] column sum [8,64,128] -> [128]: %.1f us\n", best_us([&] { (void)exe->run(in, o, &pool); }));
}

// The column form with what it must get right: two phases (variance needs the mean), mean,
// amax, a kept size that is not a multiple of the lane block (100 = 64 + 36), two kept dims (a
// block must not cross a row of the last), and thread chunks that start mid-row.
TEST(CompilerPerf, ColumnFormPhasesMeanAmaxOddSizes) {
    EMBER_REQUIRE_LLVM();
    const int64_t R = 300, A = 7, C = 100;
    Graph g;
    const int x = g.input(DType::kFloat32, {R, A, C});
    const int mk = g.reduce(Op::kMean, x, {0}, true);
    const int d = g.add(Op::kSub, {x, mk});
    g.mark_output(g.reduce(Op::kMean, x, {0}, false));
    g.mark_output(g.reduce(Op::kMean, g.add(Op::kMul, {d, d}), {0}, false));
    g.mark_output(g.reduce(Op::kAmax, x, {0}, false));
    auto exe = compile_ok(g);
    ASSERT_TRUE(exe);
    auto xs = random_floats(R * A * C, -2, 3, 7);
    std::vector<float> mean(A * C), var(A * C), mx(A * C);
    void* in[] = {xs.data()};
    void* o[] = {mean.data(), var.data(), mx.data()};
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(exe->run(in, o, &pool).ok());
    std::vector<float> wm(A * C), wv(A * C), wx(A * C, -INFINITY);
    for (int64_t k = 0; k < A * C; ++k) {
        double s = 0;
        for (int64_t r = 0; r < R; ++r) s += xs[r * A * C + k], wx[k] = std::max(wx[k], xs[r * A * C + k]);
        const double m = s / R;
        double v = 0;
        for (int64_t r = 0; r < R; ++r) v += (xs[r * A * C + k] - m) * (xs[r * A * C + k] - m);
        wm[k] = static_cast<float>(m);
        wv[k] = static_cast<float>(v / R);
    }
    expect_close(mean, wm, 1e-5f, 1e-4f);
    expect_close(var, wv, 1e-5f, 1e-4f);
    expect_close(mx, wx, 0.f, 0.f);
}

TEST(CompilerPerf, MaskedSoftmaxOverScores) {
    EMBER_REQUIRE_LLVM();
    const int64_t B = 8, N = 4, S = 64;
    Graph g;
    const int x = g.input(DType::kFloat32, {B, N, S, S});
    const int m = g.input(DType::kFloat32, {1, 1, S, S});
    Attrs a;
    a.ints = {-1};
    g.mark_output(g.add(Op::kSoftmax, {g.add(Op::kAdd, {x, m})}, a, "attn.py:5"));
    auto exe = compile_ok(g);
    ASSERT_TRUE(exe);
    auto xs = random_floats(B * N * S * S, -4, 4, 3);
    std::vector<float> ms(S * S);
    for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) ms[i * S + j] = j <= i ? 0.f : -1e9f;
    std::vector<float> got(xs.size()), want(xs.size());
    void* in[] = {xs.data(), ms.data()};
    void* o[] = {got.data()};
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(exe->run(in, o, &pool).ok());
    for (int64_t r = 0; r < B * N * S; ++r) {
        const float* row = &xs[r * S];
        const float* mr = &ms[(r % S) * S];
        double mx = -INFINITY, s = 0;
        for (int64_t c = 0; c < S; ++c) mx = std::max<double>(mx, row[c] + mr[c]);
        for (int64_t c = 0; c < S; ++c) s += std::exp(row[c] + mr[c] - mx);
        for (int64_t c = 0; c < S; ++c) want[r * S + c] = static_cast<float>(std::exp(row[c] + mr[c] - mx) / s);
    }
    expect_close(got, want, 1e-6f, 1e-5f);
    std::printf("[ perf ] masked softmax [8,4,64,64]: %.1f us\n", best_us([&] { (void)exe->run(in, o, &pool); }));
}

TEST(CompilerPerf, RmsNormForward) {
    EMBER_REQUIRE_LLVM();
    const int64_t R = 512, C = 128;
    const double eps = 1e-6;
    Graph g;
    const int x = g.input(DType::kFloat32, {R, C});
    const int w = g.input(DType::kFloat32, {C});
    const int ms = g.reduce(Op::kMean, g.add(Op::kMul, {x, x}), {-1}, true, "norm.py:4");
    const int inv = g.add(Op::kRsqrt, {g.add(Op::kAdd, {ms, g.scalar(eps)})});
    g.mark_output(g.add(Op::kMul, {g.add(Op::kMul, {x, inv}), w}, {}, "norm.py:6"));
    auto exe = compile_ok(g);
    ASSERT_TRUE(exe);
    auto xs = random_floats(R * C, -3, 3, 4), ws = random_floats(C, 0.5, 1.5, 5);
    std::vector<float> got(R * C), want(R * C);
    void* in[] = {xs.data(), ws.data()};
    void* o[] = {got.data()};
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(exe->run(in, o, &pool).ok());
    for (int64_t r = 0; r < R; ++r) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += static_cast<double>(xs[r * C + c]) * xs[r * C + c];
        const double inv_r = 1.0 / std::sqrt(s / C + eps);
        for (int64_t c = 0; c < C; ++c) want[r * C + c] = static_cast<float>(xs[r * C + c] * inv_r * ws[c]);
    }
    expect_close(got, want, 1e-5f, 1e-5f);
    std::printf("[ perf ] rmsnorm fwd [512,128]: %.1f us\n", best_us([&] { (void)exe->run(in, o, &pool); }));
}

}  // namespace
}  // namespace ember::compiler::test
