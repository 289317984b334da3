// Flash-attention style forward: each task takes one block of queries of one (batch, head) and
// streams over key blocks, keeping a running max and sum per query (online softmax) so the
// scores never exist beyond one block.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/attention/attention_internal.h"
#include "kernels/elementwise/simd.h"
#include "torch_ember/vec_math.h"

namespace ember::kernels {
namespace {

using namespace detail::attention;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Turns a block of transposed scores into exp(s - m_new) in place and updates each query's
// running max m and sum l; alpha[r] = exp(m_old - m_new) is what the query's output so far must
// be multiplied by. A query with nothing visible yet keeps m = -inf and l = 0 and gets zeros:
// its exponentials are shifted by 0 rather than computing -inf - -inf.
EMBER_SIMD_CLONES void online_softmax(float* st, int64_t nc, int64_t nr, float* m, float* l, float* alpha) {
    float mx[kBlockQ], shift[kBlockQ], sum[kBlockQ];
    for (int64_t r = 0; r < nr; ++r) mx[r] = m[r], sum[r] = 0.f;
    for (int64_t c = 0; c < nc; ++c) {
        const float* row = st + c * kBlockQ;
        for (int64_t r = 0; r < nr; ++r) mx[r] = row[r] > mx[r] ? row[r] : mx[r];
    }
    for (int64_t r = 0; r < nr; ++r) {
        const bool none = mx[r] == kNegInf;
        shift[r] = none ? 0.f : mx[r];
        alpha[r] = none ? 1.f : vmath::exp(m[r] - mx[r]);
    }
    for (int64_t c = 0; c < nc; ++c) {
        float* row = st + c * kBlockQ;
        for (int64_t r = 0; r < nr; ++r) {
            row[r] = vmath::exp(row[r] - shift[r]);
            sum[r] += row[r];
        }
    }
    for (int64_t r = 0; r < nr; ++r) {
        l[r] = l[r] * alpha[r] + sum[r];
        m[r] = mx[r];
    }
}

EMBER_SIMD_CLONES void rescale_rows(float* x, int64_t ld, int64_t nr, int64_t n, const float* alpha) {
    for (int64_t r = 0; r < nr; ++r) {
        if (alpha[r] == 1.f) continue;
        float* row = x + r * ld;
        for (int64_t c = 0; c < n; ++c) row[c] *= alpha[r];
    }
}

struct ForwardBuffers {
    std::vector<float> q, qt, k, v, st, bias, o, m, l, alpha;
    explicit ForwardBuffers(const Problem& p)
        : q(kBlockQ * pad16(p.D)), qt(p.D * kBlockQ), k(kBlockK * pad16(p.D)), v(kBlockK * pad16(p.Dv)),
          st(kBlockK * kBlockQ), bias(p.mask != nullptr ? kBlockK * kBlockQ : 0), o(kBlockQ * pad16(p.Dv)),
          m(kBlockQ), l(kBlockQ), alpha(kBlockQ) {}
};

void forward_block(const Problem& p, const AttentionArgs& args, int64_t b, int64_t h, int64_t qb,
                   ForwardBuffers& buf) {
    const int64_t i0 = qb * kBlockQ, nr = std::min(kBlockQ, p.Lq - i0);
    const int64_t hk = h / p.group();
    const int64_t ldo = pad16(p.Dv);
    int64_t ldq;
    const float* q = float_rows(p.q, b, h, i0, nr, p.D, false, buf.q.data(), &ldq);
    transpose(buf.qt.data(), kBlockQ, q, ldq, nr, p.D);
    std::fill(buf.o.begin(), buf.o.end(), 0.f);
    std::fill(buf.m.begin(), buf.m.end(), kNegInf);
    std::fill(buf.l.begin(), buf.l.end(), 0.f);
    const int64_t key_end = p.key_end(i0, nr);
    for (int64_t j0 = 0; j0 < key_end; j0 += kBlockK) {
        const int64_t nc = std::min(kBlockK, key_end - j0);
        int64_t ldk, ldv;
        const float* k = float_rows(p.k, b, hk, j0, nc, p.D, false, buf.k.data(), &ldk);
        const float* v = float_rows(p.v, b, hk, j0, nc, p.Dv, true, buf.v.data(), &ldv);
        block_scores(p, b, h, i0, nr, j0, nc, k, ldk, buf.qt.data(), buf.st.data(), buf.bias.data());
        online_softmax(buf.st.data(), nc, nr, buf.m.data(), buf.l.data(), buf.alpha.data());
        rescale_rows(buf.o.data(), ldo, nr, ldo, buf.alpha.data());
        gemm_at(buf.o.data(), ldo, buf.st.data(), kBlockQ, v, ldv, nr, ldo, nc, true);
    }
    // A fully masked row has l = 0: output 0 and lse -inf rather than 0/0.
    for (int64_t r = 0; r < nr; ++r) {
        const bool any = buf.l[r] > 0.f;
        *lse_at(args.lse, b, h, i0 + r) = any ? buf.m[r] + std::log(buf.l[r]) : kNegInf;
        buf.alpha[r] = any ? 1.f / buf.l[r] : 0.f;
    }
    store_rows(args.out, b, h, i0, nr, p.Dv, buf.o.data(), ldo, buf.alpha.data(), 1.f);
}

}  // namespace

Status attention_forward(const AttentionArgs& args, runtime::ThreadPool* pool) {
    const char* op = "attention_forward";
    Problem p;
    EMBER_RETURN_IF_ERROR(check_problem(op, args.q, args.k, args.v, args.mask, args.causal, args.scale, &p));
    EMBER_RETURN_IF_ERROR(check_tensor(op, "out", args.out, p.B, p.Hq, p.Lq, p.Dv));
    EMBER_RETURN_IF_ERROR(check_lse(op, args.lse, p));
    const int64_t blocks = p.q_blocks();
    const int64_t tasks = p.B * p.Hq * blocks;
    const int64_t cost = std::min(kBlockQ, p.Lq) * p.Lk * (p.D + p.Dv);
    parallel_tasks(pool, tasks, cost, [&](int64_t begin, int64_t end) {
        ForwardBuffers buf(p);
        for (int64_t t = begin; t < end; ++t) {
            const int64_t bh = t / blocks;
            forward_block(p, args, bh / p.Hq, bh % p.Hq, balanced_block(t % blocks, blocks), buf);
        }
    });
    return Status();
}

}  // namespace ember::kernels
