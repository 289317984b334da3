// End-to-end compiled graphs against straightforward C++ loops: build a Graph by hand, compile,
// run on a thread pool, compare.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "compiler_test_util.h"
#include "runtime/thread_pool.h"

namespace ember::compiler::test {
namespace {

void report(const char* name, const CompileStats& s) {
    std::printf("[ compile ] %-24s %s (%.2f ms per kernel)\n", name, s.to_string().c_str(),
                s.kernels ? s.total_ms / s.kernels : s.total_ms);
}

float silu(float x) { return x / (1.f + std::exp(-x)); }

TEST(CompilerFused, SiluMulWithBroadcastFloat32AndBf16) {
    EMBER_REQUIRE_LLVM();
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
        const int64_t R = 64, C = 300;
        Graph g;
        const int x = g.input(dt, {R, C});
        const int y = g.input(dt, {C});
        const int s = g.add(Op::kSilu, {x}, {}, "model.py:10");
        const int y1 = g.add(Op::kAdd, {y, g.scalar(1.0)}, {}, "model.py:11");
        g.mark_output(g.add(Op::kMul, {s, y1}, {}, "model.py:11"));
        CompileStats stats;
        auto exe = compile_ok(g, &stats);
        ASSERT_TRUE(exe);
        report(dt == DType::kFloat32 ? "silu*bcast f32" : "silu*bcast bf16", stats);
        EXPECT_EQ(stats.kernels, 1);
        auto xs = random_floats(R * C, -4, 4, 1), ys = random_floats(C, -1, 1, 2);
        runtime::ThreadPool pool(2);
        std::vector<float> got(R * C), want(R * C);
        if (dt == DType::kBFloat16) {
            auto xb = to_bf16(xs), yb = to_bf16(ys);
            xs = from_bf16(xb);
            ys = from_bf16(yb);
            std::vector<uint16_t> out(R * C);
            void* in[] = {xb.data(), yb.data()};
            void* o[] = {out.data()};
            ASSERT_TRUE(exe->run(in, o, &pool).ok());
            got = from_bf16(out);
        } else {
            void* in[] = {xs.data(), ys.data()};
            void* o[] = {got.data()};
            ASSERT_TRUE(exe->run(in, o, &pool).ok());
        }
        for (int64_t r = 0; r < R; ++r)
            for (int64_t c = 0; c < C; ++c) want[r * C + c] = silu(xs[r * C + c]) * (ys[c] + 1.f);
        if (dt == DType::kBFloat16) expect_close(got, want, 1e-2f, 1e-2f);
        else expect_close(got, want, 1e-5f, 1e-5f);
    }
}

std::vector<float> ref_softmax(const std::vector<float>& x, int64_t R, int64_t C) {
    std::vector<float> y(x.size());
    for (int64_t r = 0; r < R; ++r) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; ++c) m = std::max<double>(m, x[r * C + c]);
        for (int64_t c = 0; c < C; ++c) s += std::exp(x[r * C + c] - m);
        for (int64_t c = 0; c < C; ++c) y[r * C + c] = static_cast<float>(std::exp(x[r * C + c] - m) / s);
    }
    return y;
}

TEST(CompilerFused, SoftmaxOverRowsIsOneKernel) {
    EMBER_REQUIRE_LLVM();
    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
        const int64_t R = 37, C = 1000;
        Graph g;
        const int x = g.input(dt, {R, C});
        Attrs a;
        a.ints = {-1};
        g.mark_output(g.add(Op::kSoftmax, {x}, a, "attn.py:5"));
        CompileStats stats;
        auto exe = compile_ok(g, &stats);
        ASSERT_TRUE(exe);
        report("softmax", stats);
        EXPECT_EQ(stats.kernels, 1);
        auto xs = random_floats(R * C, -8, 8, 3);
        xs[5] = 1e4f;  // the max shift must keep exp finite
        runtime::ThreadPool pool(2);
        std::vector<float> got(R * C);
        if (dt == DType::kBFloat16) {
            auto xb = to_bf16(xs);
            xs = from_bf16(xb);
            std::vector<uint16_t> out(R * C);
            void* in[] = {xb.data()};
            void* o[] = {out.data()};
            ASSERT_TRUE(exe->run(in, o, &pool).ok());
            got = from_bf16(out);
            expect_close(got, ref_softmax(xs, R, C), 1e-4f, 1e-2f);
        } else {
            void* in[] = {xs.data()};
            void* o[] = {got.data()};
            ASSERT_TRUE(exe->run(in, o, &pool).ok());
            expect_close(got, ref_softmax(xs, R, C), 1e-7f, 1e-5f);
        }
    }
}

TEST(CompilerFused, RmsNormBf16IsOneKernel) {
    EMBER_REQUIRE_LLVM();
    const int64_t R = 16, C = 512;
    const double eps = 1e-6;
    Graph g;
    const int x = g.input(DType::kBFloat16, {R, C});
    const int w = g.input(DType::kBFloat16, {C});
    const int xf = g.cast(x, DType::kFloat32, "norm.py:3");
    const int ms = g.reduce(Op::kMean, g.add(Op::kMul, {xf, xf}), {-1}, true, "norm.py:4");
    const int inv = g.add(Op::kRsqrt, {g.add(Op::kAdd, {ms, g.scalar(eps)})});
    const int y = g.cast(g.add(Op::kMul, {xf, inv}), DType::kBFloat16);
    g.mark_output(g.add(Op::kMul, {y, w}, {}, "norm.py:6"));
    CompileStats stats;
    auto exe = compile_ok(g, &stats);
    ASSERT_TRUE(exe);
    report("rmsnorm bf16", stats);
    EXPECT_EQ(stats.kernels, 1);
    auto xb = to_bf16(random_floats(R * C, -3, 3, 4)), wb = to_bf16(random_floats(C, 0.5, 1.5, 5));
    auto xs = from_bf16(xb), ws = from_bf16(wb);
    std::vector<uint16_t> out(R * C);
    void* in[] = {xb.data(), wb.data()};
    void* o[] = {out.data()};
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(exe->run(in, o, &pool).ok());
    std::vector<float> want(R * C);
    for (int64_t r = 0; r < R; ++r) {
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += xs[r * C + c] * xs[r * C + c];
        const float inv_r = static_cast<float>(1.0 / std::sqrt(s / C + eps));
        for (int64_t c = 0; c < C; ++c) {
            const float yv = kernels::to_float(kernels::to_bfloat16(xs[r * C + c] * inv_r));
            want[r * C + c] = yv * ws[c];
        }
    }
    expect_close(from_bf16(out), want, 1e-2f, 1e-2f);
}

// One AdamW step over two parameters of different shapes; p, m and v are updated in place.
TEST(CompilerFused, AdamWInPlaceUpdate) {
    EMBER_REQUIRE_LLVM();
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, bc1 = 1 - b1, bc2 = 1 - b2;
    Graph g;
    std::vector<std::vector<int64_t>> shapes = {{1000}, {40, 50}};
    for (const auto& sh : shapes) {
        const int p = g.input(DType::kFloat32, sh), gr = g.input(DType::kFloat32, sh);
        const int m = g.input(DType::kFloat32, sh), v = g.input(DType::kFloat32, sh);
        const int pi = g.node(p).input_index, mi = g.node(m).input_index, vi = g.node(v).input_index;
        auto mul = [&](int a, double s) { return g.add(Op::kMul, {a, g.scalar(s)}); };
        const int m2 = g.add(Op::kAdd, {mul(m, b1), mul(gr, 1 - b1)}, {}, "optim.py:20");
        const int v2 = g.add(Op::kAdd, {mul(v, b2), mul(g.add(Op::kMul, {gr, gr}), 1 - b2)}, {}, "optim.py:21");
        const int mhat = mul(m2, 1.0 / bc1), vhat = mul(v2, 1.0 / bc2);
        const int upd = g.add(Op::kDiv, {mhat, g.add(Op::kAdd, {g.add(Op::kSqrt, {vhat}), g.scalar(eps)})});
        const int p2 = g.add(Op::kSub, {mul(p, 1 - lr * wd), mul(upd, lr)}, {}, "optim.py:24");
        g.mark_output_alias(p2, pi);
        g.mark_output_alias(m2, mi);
        g.mark_output_alias(v2, vi);
    }
    CompileStats stats;
    auto exe = compile_ok(g, &stats);
    ASSERT_TRUE(exe);
    report("adamw", stats);
    EXPECT_EQ(stats.kernels, 2);  // one per shape, no copies
    std::vector<std::vector<float>> data;
    for (size_t i = 0; i < shapes.size(); ++i) {
        const size_t n = static_cast<size_t>(numel_of(shapes[i]));
        data.push_back(random_floats(n, -1, 1, 10 + i));
        data.push_back(random_floats(n, -1, 1, 20 + i));
        data.push_back(random_floats(n, -0.1f, 0.1f, 30 + i));
        data.push_back(random_floats(n, 0, 0.01f, 40 + i));
    }
    auto before = data;
    std::vector<void*> in;
    for (auto& d : data) in.push_back(d.data());
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(exe->run(in.data(), nullptr, &pool).ok());
    for (size_t i = 0; i < shapes.size(); ++i) {
        const auto &p = before[4 * i], &gr = before[4 * i + 1], &m = before[4 * i + 2], &v = before[4 * i + 3];
        std::vector<float> wp(p.size()), wm(p.size()), wv(p.size());
        for (size_t j = 0; j < p.size(); ++j) {
            wm[j] = b1 * m[j] + (1 - b1) * gr[j];
            wv[j] = b2 * v[j] + (1 - b2) * gr[j] * gr[j];
            wp[j] = p[j] * (1 - lr * wd) - lr * (wm[j] / bc1) / (std::sqrt(wv[j] / bc2) + eps);
        }
        expect_close(data[4 * i], wp, 1e-6f, 1e-5f);
        expect_close(data[4 * i + 2], wm, 1e-7f, 1e-5f);
        expect_close(data[4 * i + 3], wv, 1e-9f, 1e-5f);
    }
}

// linear(x, w, b) followed by gelu: the transposed weight reaches the GEMM as a strided view.
TEST(CompilerFused, MatmulBiasGelu) {
    EMBER_REQUIRE_LLVM();
    use_reference_gemm();
    const int64_t M = 32, K = 48, N = 40;
    for (bool addmm : {false, true}) {
        Graph g;
        const int x = g.input(DType::kFloat32, {M, K});
        const int w = g.input(DType::kFloat32, {N, K});
        const int b = g.input(DType::kFloat32, {N});
        Attrs t;
        t.ints = {0, 1};
        const int wt = g.add(Op::kTranspose, {w}, t, "mlp.py:7");
        int h;
        if (addmm) {
            h = g.add(Op::kAddmm, {b, x, wt}, {}, "mlp.py:7");
        } else {
            h = g.add(Op::kAdd, {g.add(Op::kMm, {x, wt}, {}, "mlp.py:7"), b}, {}, "mlp.py:7");
        }
        g.mark_output(g.add(Op::kGelu, {h}, {}, "mlp.py:8"));
        CompileStats stats;
        auto exe = compile_ok(g, &stats);
        ASSERT_TRUE(exe);
        report(addmm ? "addmm+gelu" : "mm+bias+gelu", stats);
        EXPECT_EQ(stats.library_calls, 1);
        EXPECT_EQ(stats.kernels, addmm ? 2 : 1);
        auto xs = random_floats(M * K, -1, 1, 6), ws = random_floats(N * K, -1, 1, 7), bs = random_floats(N, -1, 1, 8);
        std::vector<float> got(M * N), want(M * N);
        void* in[] = {xs.data(), ws.data(), bs.data()};
        void* o[] = {got.data()};
        runtime::ThreadPool pool(2);
        ASSERT_TRUE(exe->run(in, o, &pool).ok());
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
                double acc = bs[j];
                for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(xs[i * K + k]) * ws[j * K + k];
                want[i * N + j] = static_cast<float>(0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0))));
            }
        expect_close(got, want, 1e-5f, 1e-5f);
    }
}

// A permuted, reshaped view reduced over dim 1 and a column sum over dim 0 of the same input.
TEST(CompilerFused, ViewsAndColumnReduction) {
    EMBER_REQUIRE_LLVM();
    Graph g;
    const int x = g.input(DType::kFloat32, {8, 6, 10});
    Attrs perm, shape;
    perm.ints = {2, 0, 1};
    shape.ints = {10, -1};
    const int v = g.add(Op::kReshape, {g.add(Op::kPermute, {x}, perm)}, shape);  // [10, 48]
    g.mark_output(g.reduce(Op::kSum, g.add(Op::kExp, {v}), {1}, false));
    g.mark_output(g.reduce(Op::kAmax, x, {0}, false));  // [6, 10]
    auto exe = compile_ok(g);
    ASSERT_TRUE(exe);
    auto xs = random_floats(480, -2, 2, 9);
    std::vector<float> s(10), mx(60);
    void* in[] = {xs.data()};
    void* o[] = {s.data(), mx.data()};
    ASSERT_TRUE(exe->run(in, o, nullptr).ok());
    std::vector<float> ws(10, 0), wm(60, -INFINITY);
    for (int a = 0; a < 8; ++a)
        for (int b = 0; b < 6; ++b)
            for (int c = 0; c < 10; ++c) {
                const float val = xs[(a * 6 + b) * 10 + c];
                ws[c] += std::exp(val);
                wm[b * 10 + c] = std::max(wm[b * 10 + c], val);
            }
    expect_close(s, ws, 1e-5f, 1e-5f);
    expect_close(mx, wm, 0, 0);
}

// A long 1-d elementwise chain is chunked so that it still splits across the pool.
TEST(CompilerFused, LongVectorSplitsAcrossThreads) {
    EMBER_REQUIRE_LLVM();
    const int64_t n = (1 << 20) + 7;
    Graph g;
    const int x = g.input(DType::kFloat32, {n});
    g.mark_output(g.add(Op::kTanh, {g.add(Op::kMul, {x, g.scalar(0.5)})}));
    CompileStats stats;
    auto exe = compile_ok(g, &stats);
    ASSERT_TRUE(exe);
    EXPECT_GT(exe->plan().steps[0].range, 1);
    auto xs = random_floats(n, -5, 5, 11);
    std::vector<float> got(n), want(n);
    void* in[] = {xs.data()};
    void* o[] = {got.data()};
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(exe->run(in, o, &pool).ok());
    for (int64_t i = 0; i < n; ++i) want[i] = std::tanh(xs[i] * 0.5f);
    expect_close(got, want, 1e-6f, 1e-5f);
}

}  // namespace
}  // namespace ember::compiler::test

namespace ember::compiler::test {
namespace {

// Compile latency of a larger program: 24 layer-norm + gelu blocks over different widths (one
// kernel each for the norm, plus softmaxes), like a small transformer step. Prints; asserts no
// time.
TEST(CompilerFused, CompileLatencyManyKernels) {
    EMBER_REQUIRE_LLVM();
    Graph g;
    for (int i = 0; i < 24; ++i) {
        const int64_t w = 64 + 8 * i;
        const int x = g.input(DType::kFloat32, {32, w});
        const int mu = g.reduce(Op::kMean, x, {-1}, true);
        const int xc = g.add(Op::kSub, {x, mu});
        const int var = g.reduce(Op::kMean, g.add(Op::kMul, {xc, xc}), {-1}, true);
        const int y = g.add(Op::kMul, {xc, g.add(Op::kRsqrt, {g.add(Op::kAdd, {var, g.scalar(1e-5)})})});
        g.mark_output(g.add(Op::kGelu, {y}));
        Attrs a;
        a.ints = {0};
        g.mark_output(g.add(Op::kSoftmax, {x}, a));
    }
    CompileStats stats;
    auto exe = compile_ok(g, &stats);
    ASSERT_TRUE(exe);
    std::printf("[ compile ] %d kernels: %s (%.2f ms per kernel)\n", stats.kernels, stats.to_string().c_str(),
                stats.total_ms / stats.kernels);
}

}  // namespace
}  // namespace ember::compiler::test
