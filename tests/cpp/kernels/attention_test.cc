#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/dispatch.h"
#include "norm_test_util.h"
#include "runtime/thread_pool.h"

namespace ember::kernels {
namespace {

using norm_test::random_values;

constexpr double kInf = std::numeric_limits<double>::infinity();

// A tensor given by its logical row-major values. With `transposed` a 4-d [B, H, L, D] tensor
// lives in [B, L, H, D] memory, the layout PyTorch hands over after q.transpose(1, 2).
struct Buf {
    DType dtype;
    std::vector<int64_t> sizes, strides;
    std::vector<unsigned char> bytes;

    Buf(DType t, std::vector<int64_t> s, const std::vector<double>& values, bool transposed = false)
        : dtype(t), sizes(std::move(s)), strides(sizes.size()) {
        std::vector<int> order(sizes.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
        if (transposed) std::swap(order[1], order[2]);
        int64_t stride = 1;
        for (int i = static_cast<int>(order.size()) - 1; i >= 0; --i) {
            strides[order[i]] = stride;
            stride *= sizes[order[i]];
        }
        bytes.resize(stride * element_size(t));
        EXPECT_EQ(static_cast<int64_t>(values.size()), stride);
        for (int64_t i = 0; i < stride; ++i)
            EMBER_DISPATCH_REAL(t, reinterpret_cast<scalar_t*>(bytes.data())[offset(i)] =
                                       detail::convert<scalar_t>(values[i]));
    }
    int64_t numel() const {
        int64_t n = 1;
        for (int64_t s : sizes) n *= s;
        return n;
    }
    // Memory offset of the i-th element in logical order.
    int64_t offset(int64_t i) const {
        int64_t off = 0;
        for (int d = static_cast<int>(sizes.size()) - 1; d >= 0; --d) {
            off += (i % sizes[d]) * strides[d];
            i /= sizes[d];
        }
        return off;
    }
    TensorView view() {
        TensorView v;
        v.data = bytes.data();
        v.dtype = dtype;
        v.ndim = static_cast<int>(sizes.size());
        for (int i = 0; i < v.ndim; ++i) v.sizes[i] = sizes[i], v.strides[i] = strides[i];
        return v;
    }
    std::vector<double> values() const {
        std::vector<double> out(numel());
        for (int64_t i = 0; i < numel(); ++i)
            EMBER_DISPATCH_REAL(dtype, out[i] = detail::as_double(reinterpret_cast<const scalar_t*>(bytes.data())[offset(i)]));
        return out;
    }
};

struct Case {
    int64_t B = 1, Hq = 1, Hkv = 1, Lq = 1, Lk = 1, D = 1, Dv = 1;
    bool causal = false;
    DType dtype = DType::kFloat32;
    bool transposed = false;  // q, k, v, out, grad_out and the grads in [B, L, H, D] memory
    double q_range = 1;       // q values in [-q_range, q_range]; larger gives peakier softmax
    unsigned seed = 1;
    double scale() const { return 1.0 / std::sqrt(static_cast<double>(D)); }
};

// The additive bias the mask view means, expanded to [B, Hq, Lq, Lk]: bool false is -inf.
std::vector<double> dense_bias(const TensorView& m, const Case& c) {
    const int64_t full[4] = {c.B, c.Hq, c.Lq, c.Lk};
    std::vector<double> bias(c.B * c.Hq * c.Lq * c.Lk, 0.0);
    if (m.data == nullptr) return bias;
    for (int64_t e = 0; e < static_cast<int64_t>(bias.size()); ++e) {
        int64_t idx[4], rest = e;
        for (int d = 3; d >= 0; --d) idx[d] = rest % full[d], rest /= full[d];
        int64_t off = 0;
        for (int d = 0; d < m.ndim; ++d) {
            const int fd = d + 4 - m.ndim;
            if (m.sizes[d] != 1) off += idx[fd] * m.strides[d];
        }
        double v = 0;
        EMBER_DISPATCH_REAL(m.dtype, v = detail::as_double(reinterpret_cast<const scalar_t*>(m.data)[off]));
        bias[e] = m.dtype == DType::kBool ? (v != 0 ? 0.0 : -kInf) : v;
    }
    return bias;
}

struct Reference {
    std::vector<double> out, lse, p, dq, dk, dv;
};

// Scores, softmax and weighted sum written out in double; the backward by the same formulas
// (validated against finite differences below).
Reference reference(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& go, const std::vector<double>& bias) {
    Reference r;
    const int64_t group = c.Hq / c.Hkv;
    r.out.assign(c.B * c.Hq * c.Lq * c.Dv, 0.0);
    r.lse.assign(c.B * c.Hq * c.Lq, -kInf);
    r.p.assign(c.B * c.Hq * c.Lq * c.Lk, 0.0);
    r.dq.assign(c.B * c.Hq * c.Lq * c.D, 0.0);
    r.dk.assign(c.B * c.Hkv * c.Lk * c.D, 0.0);
    r.dv.assign(c.B * c.Hkv * c.Lk * c.Dv, 0.0);
    for (int64_t b = 0; b < c.B; ++b) {
        for (int64_t h = 0; h < c.Hq; ++h) {
            const int64_t bh = b * c.Hq + h, bk = b * c.Hkv + h / group;
            for (int64_t i = 0; i < c.Lq; ++i) {
                const double* qi = &q[(bh * c.Lq + i) * c.D];
                std::vector<double> s(c.Lk);
                double m = -kInf;
                for (int64_t j = 0; j < c.Lk; ++j) {
                    const double* kj = &k[(bk * c.Lk + j) * c.D];
                    double dot = 0;
                    for (int64_t d = 0; d < c.D; ++d) dot += qi[d] * kj[d];
                    s[j] = (c.causal && j > i) ? -kInf : c.scale() * dot + bias[(bh * c.Lq + i) * c.Lk + j];
                    m = std::max(m, s[j]);
                }
                if (m == -kInf) continue;  // fully masked: zeros, lse -inf
                double sum = 0;
                for (int64_t j = 0; j < c.Lk; ++j) sum += std::exp(s[j] - m);
                r.lse[bh * c.Lq + i] = m + std::log(sum);
                double* p = &r.p[(bh * c.Lq + i) * c.Lk];
                double* o = &r.out[(bh * c.Lq + i) * c.Dv];
                for (int64_t j = 0; j < c.Lk; ++j) {
                    p[j] = std::exp(s[j] - m) / sum;
                    for (int64_t e = 0; e < c.Dv; ++e) o[e] += p[j] * v[(bk * c.Lk + j) * c.Dv + e];
                }
                const double* g = &go[(bh * c.Lq + i) * c.Dv];
                double di = 0;
                for (int64_t e = 0; e < c.Dv; ++e) di += g[e] * o[e];
                for (int64_t j = 0; j < c.Lk; ++j) {
                    const double* vj = &v[(bk * c.Lk + j) * c.Dv];
                    double dp = 0;
                    for (int64_t e = 0; e < c.Dv; ++e) {
                        dp += g[e] * vj[e];
                        r.dv[(bk * c.Lk + j) * c.Dv + e] += p[j] * g[e];
                    }
                    const double ds = p[j] * (dp - di);
                    for (int64_t d = 0; d < c.D; ++d) {
                        r.dq[(bh * c.Lq + i) * c.D + d] += c.scale() * ds * k[(bk * c.Lk + j) * c.D + d];
                        r.dk[(bk * c.Lk + j) * c.D + d] += c.scale() * ds * qi[d];
                    }
                }
            }
        }
    }
    return r;
}

struct Attn {
    Buf q, k, v, go, out, lse, dq, dk, dv;
    explicit Attn(const Case& c)
        : q(c.dtype, {c.B, c.Hq, c.Lq, c.D},
            random_values(c.B * c.Hq * c.Lq * c.D, -c.q_range, c.q_range, c.seed), c.transposed),
          k(c.dtype, {c.B, c.Hkv, c.Lk, c.D}, random_values(c.B * c.Hkv * c.Lk * c.D, -1, 1, c.seed + 1),
            c.transposed),
          v(c.dtype, {c.B, c.Hkv, c.Lk, c.Dv}, random_values(c.B * c.Hkv * c.Lk * c.Dv, -1, 1, c.seed + 2),
            c.transposed),
          go(c.dtype, {c.B, c.Hq, c.Lq, c.Dv}, random_values(c.B * c.Hq * c.Lq * c.Dv, -1, 1, c.seed + 3),
             c.transposed),
          // Outputs start as garbage so that an element the kernel skips shows.
          out(c.dtype, {c.B, c.Hq, c.Lq, c.Dv}, std::vector<double>(c.B * c.Hq * c.Lq * c.Dv, 7), c.transposed),
          lse(DType::kFloat32, {c.B, c.Hq, c.Lq}, std::vector<double>(c.B * c.Hq * c.Lq, 7)),
          dq(c.dtype, {c.B, c.Hq, c.Lq, c.D}, std::vector<double>(c.B * c.Hq * c.Lq * c.D, 7), c.transposed),
          dk(c.dtype, {c.B, c.Hkv, c.Lk, c.D}, std::vector<double>(c.B * c.Hkv * c.Lk * c.D, 7), c.transposed),
          dv(c.dtype, {c.B, c.Hkv, c.Lk, c.Dv}, std::vector<double>(c.B * c.Hkv * c.Lk * c.Dv, 7), c.transposed) {}

    Status forward(const Case& c, const TensorView& mask, runtime::ThreadPool* pool) {
        AttentionArgs a;
        a.q = q.view(), a.k = k.view(), a.v = v.view(), a.mask = mask;
        a.causal = c.causal, a.scale = c.scale();
        a.out = out.view(), a.lse = lse.view();
        return attention_forward(a, pool);
    }
    Status backward(const Case& c, const TensorView& mask, runtime::ThreadPool* pool) {
        AttentionBackwardArgs a;
        a.grad_out = go.view(), a.q = q.view(), a.k = k.view(), a.v = v.view();
        a.out = out.view(), a.lse = lse.view(), a.mask = mask;
        a.causal = c.causal, a.scale = c.scale();
        a.grad_q = dq.view(), a.grad_k = dk.view(), a.grad_v = dv.view();
        return attention_backward(a, pool);
    }
    // On the values the kernel saw (rounded to the dtype).
    Reference reference(const Case& c, const TensorView& mask) const {
        return kernels::reference(c, q.values(), k.values(), v.values(), go.values(), dense_bias(mask, c));
    }
};

struct Tolerance {
    double rel, abs;
};

// |got - want| <= abs * max|want| + rel * |want|; infinities must match; never NaN.
void expect_close(const char* what, const std::vector<double>& got, const std::vector<double>& want, Tolerance t) {
    ASSERT_EQ(got.size(), want.size()) << what;
    double scale = 0;
    for (double w : want)
        if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
    int bad = 0;
    for (size_t i = 0; i < got.size() && bad < 5; ++i) {
        if (std::isinf(want[i])) {
            if (got[i] != want[i]) ++bad;
            EXPECT_EQ(got[i], want[i]) << what << " at " << i;
            continue;
        }
        const double tol = t.abs * scale + t.rel * std::fabs(want[i]);
        if (!(std::fabs(got[i] - want[i]) <= tol)) ++bad;
        EXPECT_NEAR(got[i], want[i], tol) << what << " at " << i;
    }
}

Tolerance forward_tolerance(DType t) {
    // Half precision outputs carry one rounding (2^-9 or 2^-12 relative); float is limited by
    // float accumulation over the keys.
    if (t == DType::kBFloat16) return {1.0 / 256, 1e-4};
    if (t == DType::kFloat16) return {1e-3, 1e-4};
    return {1e-5, 2e-6};
}
Tolerance backward_tolerance(DType t) {
    // On top of rounding the grads, low precision sees D_i = rowsum(dO * O) from the rounded O.
    if (t == DType::kBFloat16) return {1.0 / 64, 1.0 / 128};
    if (t == DType::kFloat16) return {4e-3, 2e-3};
    return {1e-4, 1e-5};
}

Tolerance operator*(Tolerance t, double f) { return {t.rel * f, t.abs * f}; }

// Forward and backward of `c` against the double reference. `slack` widens the tolerances for
// large scores, whose float rounding (relative to the score) moves every probability.
void check_case(const Case& c, const TensorView& mask = TensorView(), runtime::ThreadPool* pool = nullptr,
                double slack = 1) {
    Attn run(c);
    ASSERT_TRUE(run.forward(c, mask, pool).ok());
    ASSERT_TRUE(run.backward(c, mask, pool).ok());
    const Reference want = run.reference(c, mask);
    expect_close("out", run.out.values(), want.out, forward_tolerance(c.dtype) * slack);
    expect_close("lse", run.lse.values(), want.lse, Tolerance{1e-5, 1e-6} * slack);
    expect_close("grad_q", run.dq.values(), want.dq, backward_tolerance(c.dtype) * slack);
    expect_close("grad_k", run.dk.values(), want.dk, backward_tolerance(c.dtype) * slack);
    expect_close("grad_v", run.dv.values(), want.dv, backward_tolerance(c.dtype) * slack);
}

std::vector<double> bool_values(size_t n, double p_true, unsigned seed) {
    std::vector<double> u = random_values(n, 0, 1, seed);
    for (double& x : u) x = x < p_true ? 1 : 0;
    return u;
}

}  // namespace

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
    // The reference backward checks the kernel, so first check it: loss = sum(out * go).
    Case c;
    c.B = 1, c.Hq = 2, c.Hkv = 1, c.Lq = 3, c.Lk = 4, c.D = 3, c.Dv = 2, c.causal = true;
    std::vector<double> q = random_values(18, -1, 1, 1);
    std::vector<double> k = random_values(12, -1, 1, 2), v = random_values(8, -1, 1, 3), go = random_values(12, -1, 1, 4);
    std::vector<double> bias = random_values(24, -1, 1, 5);
    bias[1 * 4 + 0] = -kInf;  // a masked key besides causality
    const Reference r = reference(c, q, k, v, go, bias);
    auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
        const Reference f = reference(c, qq, kk, vv, go, bias);
        double l = 0;
        for (size_t i = 0; i < f.out.size(); ++i) l += f.out[i] * go[i];
        return l;
    };
    const double h = 1e-6;
    auto check = [&](std::vector<double> x, const std::vector<double>& grad, int which) {
        for (size_t i = 0; i < x.size(); ++i) {
            std::vector<double> plus = x, minus = x;
            plus[i] += h, minus[i] -= h;
            const double fd = which == 0   ? (loss(plus, k, v) - loss(minus, k, v)) / (2 * h)
                              : which == 1 ? (loss(q, plus, v) - loss(q, minus, v)) / (2 * h)
                                           : (loss(q, k, plus) - loss(q, k, minus)) / (2 * h);
            EXPECT_NEAR(grad[i], fd, 1e-8) << "input " << which << " element " << i;
        }
    };
    check(q, r.dq, 0);
    check(k, r.dk, 1);
    check(v, r.dv, 2);
}

TEST(Attention, Float32MatchesReferenceWithDifferentHeadDims) {
    // Lengths that leave partial blocks of queries and keys; D != Dv, neither a multiple of 16.
    Case c;
    c.B = 2, c.Hq = 3, c.Hkv = 3, c.Lq = 70, c.Lk = 133, c.D = 24, c.Dv = 40;
    check_case(c);
    c.Lq = c.Lk = 65, c.D = c.Dv = 64, c.seed = 2;
    check_case(c);
    c.Lq = 1, c.Lk = 7, c.D = 5, c.Dv = 3, c.seed = 3;
    check_case(c);
}

TEST(Attention, CausalIsTopLeftAlignedWhenLengthsDiffer) {
    Case c;
    c.B = 1, c.Hq = 2, c.Hkv = 2, c.D = 32, c.Dv = 32, c.causal = true;
    for (auto [lq, lk] : {std::pair<int64_t, int64_t>{130, 130}, {100, 37}, {37, 100}}) {
        c.Lq = lq, c.Lk = lk, c.seed = static_cast<unsigned>(lq + lk);
        SCOPED_TRACE(::testing::Message() << "Lq " << lq << " Lk " << lk);
        check_case(c);
    }
    // Keys after the last query are invisible to all of them: exactly zero gradient.
    c.Lq = 37, c.Lk = 100;
    Attn run(c);
    ASSERT_TRUE(run.forward(c, TensorView(), nullptr).ok());
    ASSERT_TRUE(run.backward(c, TensorView(), nullptr).ok());
    const std::vector<double> dk = run.dk.values(), dv = run.dv.values();
    for (int64_t h = 0; h < c.Hkv; ++h)
        for (int64_t j = c.Lq; j < c.Lk; ++j) {
            for (int64_t d = 0; d < c.D; ++d) ASSERT_EQ(dk[(h * c.Lk + j) * c.D + d], 0.0);
            for (int64_t d = 0; d < c.Dv; ++d) ASSERT_EQ(dv[(h * c.Lk + j) * c.Dv + d], 0.0);
        }
}

TEST(Attention, BoolMaskBroadcastAndFullyMaskedRow) {
    Case c;
    c.B = 2, c.Hq = 2, c.Hkv = 2, c.Lq = 67, c.Lk = 80, c.D = 16, c.Dv = 20;
    std::vector<double> keep = bool_values(c.Lq * c.Lk, 0.7, 9);
    const int64_t dead = 5;
    for (int64_t j = 0; j < c.Lk; ++j) keep[dead * c.Lk + j] = 0;
    Buf mask(DType::kBool, {1, 1, c.Lq, c.Lk}, keep);
    check_case(c, mask.view());

    Attn run(c);
    ASSERT_TRUE(run.forward(c, mask.view(), nullptr).ok());
    ASSERT_TRUE(run.backward(c, mask.view(), nullptr).ok());
    const std::vector<double> out = run.out.values(), lse = run.lse.values(), dq = run.dq.values();
    for (int64_t bh = 0; bh < c.B * c.Hq; ++bh) {
        EXPECT_EQ(lse[bh * c.Lq + dead], -kInf);
        for (int64_t e = 0; e < c.Dv; ++e) EXPECT_EQ(out[(bh * c.Lq + dead) * c.Dv + e], 0.0);
        for (int64_t d = 0; d < c.D; ++d) EXPECT_EQ(dq[(bh * c.Lq + dead) * c.D + d], 0.0);
    }
    for (const Buf* t : {&run.out, &run.dq, &run.dk, &run.dv})
        for (double x : t->values()) ASSERT_FALSE(std::isnan(x));
}

TEST(Attention, FloatMaskBroadcastOverHeadsAndQueries) {
    // A key-padding style [B, 1, 1, Lk] additive mask with -inf entries, combined with causal,
    // in float32 and in the inputs' own dtype.
    Case c;
    c.B = 2, c.Hq = 2, c.Hkv = 1, c.Lq = 90, c.Lk = 90, c.D = 32, c.Dv = 16, c.causal = true;
    std::vector<double> bias = random_values(c.B * c.Lk, -2, 2, 17);
    for (int64_t j = 10; j < c.Lk; j += 7) bias[j] = -kInf;
    bias[c.Lk + 0] = -kInf;  // batch 1: query 0 sees only key 0, so its row is fully masked
    for (DType input : {DType::kFloat32, DType::kBFloat16}) {
        for (DType mask_type : {DType::kFloat32, input}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(input) << " inputs, " << dtype_name(mask_type) << " mask");
            c.dtype = input;
            Buf mask(mask_type, {c.B, 1, 1, c.Lk}, bias);
            check_case(c, mask.view());
        }
    }
}

TEST(Attention, MaskWithZeroStridesAndFewerDims) {
    Case c;
    c.B = 2, c.Hq = 2, c.Hkv = 2, c.Lq = 33, c.Lk = 70, c.D = 16, c.Dv = 16;
    Buf plain(DType::kFloat32, {c.Lq, c.Lk}, random_values(c.Lq * c.Lk, -3, 3, 4));
    // torch's expand: full sizes, stride 0 on the broadcast dims.
    TensorView expanded = plain.view();
    expanded.ndim = 4;
    const int64_t sizes[4] = {c.B, c.Hq, c.Lq, c.Lk}, strides[4] = {0, 0, c.Lk, 1};
    for (int d = 0; d < 4; ++d) expanded.sizes[d] = sizes[d], expanded.strides[d] = strides[d];
    check_case(c, expanded);
    check_case(c, plain.view());  // 2-d [Lq, Lk], aligned to the right
}

TEST(Attention, GroupedQueryHeads) {
    Case c;
    c.B = 2, c.Hq = 4, c.Hkv = 2, c.Lq = 90, c.Lk = 75, c.D = 32, c.Dv = 48, c.causal = true;
    check_case(c);
    c.causal = false, c.Hkv = 1, c.seed = 5;
    check_case(c);
}

TEST(Attention, TransposedLayoutMatchesContiguous) {
    // Same values, [B, L, H, D] memory for every 4-d tensor: the same arithmetic, so the same bits.
    Case c;
    c.B = 2, c.Hq = 4, c.Hkv = 2, c.Lq = 70, c.Lk = 66, c.D = 24, c.Dv = 32, c.causal = true;
    Buf mask(DType::kBool, {c.B, 1, c.Lq, c.Lk}, bool_values(c.B * c.Lq * c.Lk, 0.8, 3));
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
        c.dtype = t;
        Case tc = c;
        tc.transposed = true;
        check_case(tc, mask.view());
        Attn a(c), b(tc);
        ASSERT_TRUE(a.forward(c, mask.view(), nullptr).ok());
        ASSERT_TRUE(b.forward(tc, mask.view(), nullptr).ok());
        ASSERT_TRUE(a.backward(c, mask.view(), nullptr).ok());
        ASSERT_TRUE(b.backward(tc, mask.view(), nullptr).ok());
        EXPECT_EQ(a.out.values(), b.out.values());
        EXPECT_EQ(a.lse.values(), b.lse.values());
        EXPECT_EQ(a.dq.values(), b.dq.values());
        EXPECT_EQ(a.dk.values(), b.dk.values());
        EXPECT_EQ(a.dv.values(), b.dv.values());
    }
}

TEST(Attention, LowPrecisionInputsComputeInFloat) {
    Case c;
    c.B = 1, c.Hq = 2, c.Hkv = 2, c.Lq = 77, c.Lk = 100, c.D = 40, c.Dv = 24;
    for (DType t : {DType::kBFloat16, DType::kFloat16}) {
        SCOPED_TRACE(dtype_name(t));
        c.dtype = t;
        check_case(c);
        c.causal = true;
        check_case(c);
        c.causal = false;
    }
}

TEST(Attention, PeakedScoresAcrossKeyBlocksStayStable) {
    // Scores in the hundreds: exp overflows without the running max, and the max moves from
    // key block to key block, so earlier partial sums must be rescaled correctly.
    Case c;
    c.B = 1, c.Hq = 2, c.Hkv = 1, c.Lq = 64, c.Lk = 300, c.D = 16, c.Dv = 16, c.q_range = 60;
    check_case(c, TensorView(), nullptr, 4);
    c.causal = true, c.Lq = 300, c.seed = 8;
    check_case(c, TensorView(), nullptr, 4);
}

TEST(Attention, ThreadPoolMatchesSerial) {
    // Each task does 64 * Lk * (D + Dv) >= kParallelGrain multiply-adds, so both passes split
    // into one range per thread. With 3 threads and 8 tasks per kv group the ranges cut groups
    // in two (partial dK/dV sums); with one group, every range shares it.
    Case wide;
    wide.B = 2, wide.Hq = 4, wide.Hkv = 2, wide.Lq = 200, wide.Lk = 180, wide.D = 32, wide.Dv = 48, wide.causal = true;
    Case single;
    single.Lq = 512, single.Lk = 512, single.D = 64, single.Dv = 64, single.causal = true, single.seed = 4;
    ASSERT_GE(64 * wide.Lk * (wide.D + wide.Dv), runtime::kParallelGrain);
    ASSERT_GE(64 * single.Lk * (single.D + single.Dv), runtime::kParallelGrain);
    for (int threads : {3, 4}) {
        runtime::ThreadPool pool(threads);
        for (const Case& c : {wide, single}) {
            SCOPED_TRACE(::testing::Message() << threads << " threads, B " << c.B << " Hq " << c.Hq);
            Buf mask(DType::kBool, {c.B, 1, c.Lq, c.Lk}, bool_values(c.B * c.Lq * c.Lk, 0.9, 31));
            check_case(c, mask.view(), &pool);
            Attn serial(c), parallel(c);
            ASSERT_TRUE(serial.forward(c, mask.view(), nullptr).ok());
            ASSERT_TRUE(parallel.forward(c, mask.view(), &pool).ok());
            ASSERT_TRUE(serial.backward(c, mask.view(), nullptr).ok());
            ASSERT_TRUE(parallel.backward(c, mask.view(), &pool).ok());
            EXPECT_EQ(serial.out.bytes, parallel.out.bytes) << "a query block is computed the same way on any thread";
            EXPECT_EQ(serial.lse.bytes, parallel.lse.bytes);
            EXPECT_EQ(serial.dq.bytes, parallel.dq.bytes);
            // dK and dV of a split group are summed in another order.
            expect_close("grad_k", parallel.dk.values(), serial.dk.values(), {1e-5, 1e-6});
            expect_close("grad_v", parallel.dv.values(), serial.dv.values(), {1e-5, 1e-6});
            Attn again(c);
            ASSERT_TRUE(again.forward(c, mask.view(), &pool).ok());
            ASSERT_TRUE(again.backward(c, mask.view(), &pool).ok());
            EXPECT_EQ(again.dk.bytes, parallel.dk.bytes) << "the same pool sums in the same order";
            EXPECT_EQ(again.dv.bytes, parallel.dv.bytes);
        }
    }
}

TEST(Attention, EmptyLengths) {
    Case c;
    c.B = 2, c.Hq = 2, c.Hkv = 1, c.Lq = 5, c.Lk = 0, c.D = 8, c.Dv = 8;
    {
        // No keys: every row is fully masked.
        Attn run(c);
        ASSERT_TRUE(run.forward(c, TensorView(), nullptr).ok());
        ASSERT_TRUE(run.backward(c, TensorView(), nullptr).ok());
        for (double x : run.out.values()) EXPECT_EQ(x, 0.0);
        for (double x : run.lse.values()) EXPECT_EQ(x, -kInf);
        for (double x : run.dq.values()) EXPECT_EQ(x, 0.0);
    }
    {
        // No queries: nothing to compute, and the key/value gradients are zero.
        c.Lq = 0, c.Lk = 6;
        Attn run(c);
        ASSERT_TRUE(run.forward(c, TensorView(), nullptr).ok());
        ASSERT_TRUE(run.backward(c, TensorView(), nullptr).ok());
        for (double x : run.dk.values()) EXPECT_EQ(x, 0.0);
        for (double x : run.dv.values()) EXPECT_EQ(x, 0.0);
    }
}

TEST(Attention, RejectsBadArguments) {
    Case c;
    c.B = 1, c.Hq = 2, c.Hkv = 2, c.Lq = 4, c.Lk = 5, c.D = 8, c.Dv = 8;
    Attn ok(c);
    ASSERT_TRUE(ok.forward(c, TensorView(), nullptr).ok());
    auto forward = [&](AttentionArgs a) { return attention_forward(a, nullptr).code(); };
    AttentionArgs base;
    base.q = ok.q.view(), base.k = ok.k.view(), base.v = ok.v.view();
    base.out = ok.out.view(), base.lse = ok.lse.view(), base.scale = c.scale();
    EXPECT_EQ(forward(base), StatusCode::kOk);

    Case odd = c;
    odd.Hq = 3;  // not a multiple of Hkv = 2
    Attn gqa(odd);
    AttentionArgs a = base;
    a.q = gqa.q.view(), a.out = gqa.out.view(), a.lse = gqa.lse.view();
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);

    a = base;
    a.k.sizes[3] = 4;  // head dims differ
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);
    a = base;
    a.q.strides[3] = 2;  // last dimension not contiguous
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);
    a = base;
    a.out.sizes[2] = 3;
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);
    a = base;
    a.lse.dtype = DType::kFloat16;
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);
    a = base;
    a.k.dtype = DType::kBFloat16;  // mixed input dtypes
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);
    a = base;
    a.q.dtype = a.k.dtype = a.v.dtype = DType::kFloat64;
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);

    Buf wrong(DType::kBool, {1, 1, c.Lq, c.Lk + 1}, std::vector<double>(c.Lq * (c.Lk + 1), 1));
    a = base;
    a.mask = wrong.view();
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);
    Buf ints(DType::kInt32, {c.Lq, c.Lk}, std::vector<double>(c.Lq * c.Lk, 1));
    a.mask = ints.view();
    EXPECT_EQ(forward(a), StatusCode::kInvalidArgument);

    AttentionBackwardArgs g;
    g.grad_out = ok.go.view(), g.q = ok.q.view(), g.k = ok.k.view(), g.v = ok.v.view();
    g.out = ok.out.view(), g.lse = ok.lse.view(), g.scale = c.scale();
    g.grad_q = ok.dq.view(), g.grad_k = ok.dk.view(), g.grad_v = ok.dv.view();
    EXPECT_TRUE(attention_backward(g, nullptr).ok());
    g.grad_k = ok.dv.view();
    g.grad_k.sizes[2] = 6;
    EXPECT_EQ(attention_backward(g, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace ember::kernels
