// Backward from the saved lse: each task recomputes the probabilities of one block of queries
// of one head, block of keys by block of keys, as p = exp(s - lse), and with
// D_i = rowsum(dO * O) and dS = p * (dO . v - D_i):
//   dQ = scale * dS . K (owned by the task), dV += p^T . dO, dK += scale * dS^T . Q.
//
// Tasks are ordered by (batch, kv head) group, so the pool's contiguous ranges of tasks own whole
// groups except at their ends. A range accumulates each group's dK and dV in float and writes
// a group it covers entirely straight to grad_k and grad_v; a group split between ranges is
// saved as a partial sum, and the partials are added up afterwards in task order. No two
// threads ever write the same memory, and a given pool size always sums in the same order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include "kernels/attention/attention_internal.h"
#include "kernels/elementwise/simd.h"
#include "torch_ember/vec_math.h"

namespace ember::kernels {
namespace {

using namespace detail::attention;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// st becomes p = exp(st - lse) (transposed, like the scores). A fully masked query (lse = -inf)
// is shifted by 0 instead, so its -inf scores give zeros, not exp(-inf + inf).
EMBER_SIMD_CLONES void probabilities(float* st, int64_t nc, int64_t nr, const float* lse) {
    float shift[kBlockQ];
    for (int64_t r = 0; r < nr; ++r) shift[r] = lse[r] == kNegInf ? 0.f : lse[r];
    for (int64_t c = 0; c < nc; ++c) {
        float* row = st + c * kBlockQ;
        for (int64_t r = 0; r < nr; ++r) row[r] = vmath::exp(row[r] - shift[r]);
    }
}

// dpt becomes dS^T = p * (dp - D).
EMBER_SIMD_CLONES void score_grads(float* dpt, const float* pt, int64_t nc, int64_t nr, const float* d) {
    for (int64_t c = 0; c < nc; ++c) {
        float* g = dpt + c * kBlockQ;
        const float* pr = pt + c * kBlockQ;
        for (int64_t r = 0; r < nr; ++r) g[r] = pr[r] * (g[r] - d[r]);
    }
}

// d[r] = x_r . y_r, with independent partial sums so the loop vectorizes.
EMBER_SIMD_CLONES void row_dots(float* d, const float* x, int64_t ldx, const float* y, int64_t ldy, int64_t nr,
                                int64_t n) {
    constexpr int kLanes = 16;
    for (int64_t r = 0; r < nr; ++r) {
        const float* a = x + r * ldx;
        const float* b = y + r * ldy;
        float acc[kLanes] = {};
        int64_t c = 0;
        for (; c + kLanes <= n; c += kLanes)
            for (int j = 0; j < kLanes; ++j) acc[j] += a[c + j] * b[c + j];
        float sum = 0.f;
        for (int j = 0; j < kLanes; ++j) sum += acc[j];
        for (; c < n; ++c) sum += a[c] * b[c];
        d[r] = sum;
    }
}

struct BackwardBuffers {
    int64_t ldq, ldo;
    std::vector<float> q, qt, go, got, o, dq, lse, d, k, v, st, dpt, bias;
    // This range's running dK and dV of the current group: [Lk, ldq] and [Lk, ldo].
    std::vector<float> dk, dv;
    explicit BackwardBuffers(const Problem& p)
        : ldq(pad16(p.D)), ldo(pad16(p.Dv)), q(kBlockQ * ldq), qt(p.D * kBlockQ), go(kBlockQ * ldo),
          got(p.Dv * kBlockQ), o(kBlockQ * ldo), dq(kBlockQ * ldq), lse(kBlockQ), d(kBlockQ), k(kBlockK * ldq),
          v(kBlockK * ldo), st(kBlockK * kBlockQ), dpt(kBlockK * kBlockQ),
          bias(p.mask != nullptr ? kBlockK * kBlockQ : 0), dk(p.Lk * ldq), dv(p.Lk * ldo) {}
};

// Scores, probabilities and their gradients are all [keys, queries] blocks (see block_scores).
void backward_block(const Problem& p, const AttentionBackwardArgs& args, int64_t b, int64_t h, int64_t qb,
                    BackwardBuffers& buf) {
    const int64_t i0 = qb * kBlockQ, nr = std::min(kBlockQ, p.Lq - i0);
    const int64_t hk = h / p.group();
    const int64_t ldq = buf.ldq, ldo = buf.ldo;
    int64_t ld_q, ld_go, ld_o;
    const float* q = float_rows(p.q, b, h, i0, nr, p.D, true, buf.q.data(), &ld_q);
    const float* go = float_rows(args.grad_out, b, h, i0, nr, p.Dv, true, buf.go.data(), &ld_go);
    const float* o = float_rows(args.out, b, h, i0, nr, p.Dv, false, buf.o.data(), &ld_o);
    transpose(buf.qt.data(), kBlockQ, q, ld_q, nr, p.D);
    transpose(buf.got.data(), kBlockQ, go, ld_go, nr, p.Dv);
    row_dots(buf.d.data(), go, ld_go, o, ld_o, nr, p.Dv);
    for (int64_t r = 0; r < nr; ++r) buf.lse[r] = *lse_at(args.lse, b, h, i0 + r);
    std::fill(buf.dq.begin(), buf.dq.end(), 0.f);
    const int64_t key_end = p.key_end(i0, nr);
    for (int64_t j0 = 0; j0 < key_end; j0 += kBlockK) {
        const int64_t nc = std::min(kBlockK, key_end - j0);
        int64_t ldk, ldv;
        const float* k = float_rows(p.k, b, hk, j0, nc, p.D, true, buf.k.data(), &ldk);
        const float* v = float_rows(p.v, b, hk, j0, nc, p.Dv, false, buf.v.data(), &ldv);
        block_scores(p, b, h, i0, nr, j0, nc, k, ldk, buf.qt.data(), buf.st.data(), buf.bias.data());
        probabilities(buf.st.data(), nc, nr, buf.lse.data());
        gemm(buf.dpt.data(), kBlockQ, v, ldv, buf.got.data(), kBlockQ, nc, pad16(nr), p.Dv, false);
        score_grads(buf.dpt.data(), buf.st.data(), nc, nr, buf.d.data());
        gemm_at(buf.dq.data(), ldq, buf.dpt.data(), kBlockQ, k, ldk, nr, ldq, nc, true);
        gemm(buf.dv.data() + j0 * ldo, ldo, buf.st.data(), kBlockQ, go, ld_go, nc, ldo, nr, true);
        gemm(buf.dk.data() + j0 * ldq, ldq, buf.dpt.data(), kBlockQ, q, ld_q, nc, ldq, nr, true);
    }
    store_rows(args.grad_q, b, h, i0, nr, p.D, buf.dq.data(), ldq, nullptr, p.scale);
}

struct Partial {
    int64_t group, first_task;
    std::vector<float> dk, dv;
};

void store_group(const Problem& p, const AttentionBackwardArgs& args, int64_t group, const float* dk,
                 const float* dv) {
    const int64_t b = group / p.Hkv, hk = group % p.Hkv;
    store_rows(args.grad_k, b, hk, 0, p.Lk, p.D, dk, pad16(p.D), nullptr, p.scale);
    store_rows(args.grad_v, b, hk, 0, p.Lk, p.Dv, dv, pad16(p.Dv), nullptr, 1.f);
}

Status check_backward(const char* op, const AttentionBackwardArgs& args, Problem* p) {
    EMBER_RETURN_IF_ERROR(check_problem(op, args.q, args.k, args.v, args.mask, args.causal, args.scale, p));
    EMBER_RETURN_IF_ERROR(check_tensor(op, "grad_out", args.grad_out, p->B, p->Hq, p->Lq, p->Dv));
    EMBER_RETURN_IF_ERROR(check_tensor(op, "out", args.out, p->B, p->Hq, p->Lq, p->Dv));
    EMBER_RETURN_IF_ERROR(check_lse(op, args.lse, *p));
    EMBER_RETURN_IF_ERROR(check_tensor(op, "grad_q", args.grad_q, p->B, p->Hq, p->Lq, p->D));
    EMBER_RETURN_IF_ERROR(check_tensor(op, "grad_k", args.grad_k, p->B, p->Hkv, p->Lk, p->D));
    EMBER_RETURN_IF_ERROR(check_tensor(op, "grad_v", args.grad_v, p->B, p->Hkv, p->Lk, p->Dv));
    return Status();
}

}  // namespace

Status attention_backward(const AttentionBackwardArgs& args, runtime::ThreadPool* pool) {
    Problem p;
    EMBER_RETURN_IF_ERROR(check_backward("attention_backward", args, &p));
    const int64_t groups = p.B * p.Hkv;
    const int64_t blocks = p.q_blocks();
    if (p.Hq == 0 || blocks == 0) {
        // No query reads any key: the key and value gradients are zero.
        std::vector<float> zeros(p.Lk * std::max(pad16(p.D), pad16(p.Dv)), 0.f);
        for (int64_t g = 0; g < groups; ++g) store_group(p, args, g, zeros.data(), zeros.data());
        return Status();
    }
    const int64_t per_group = p.group() * blocks;
    const int64_t cost = std::min(kBlockQ, p.Lq) * p.Lk * (3 * p.D + 2 * p.Dv);
    std::mutex mu;
    std::vector<Partial> partials;
    parallel_tasks(pool, groups * per_group, cost, [&](int64_t begin, int64_t end) {
        BackwardBuffers buf(p);
        for (int64_t g = begin / per_group; g * per_group < end; ++g) {
            const int64_t first = std::max(begin, g * per_group), last = std::min(end, (g + 1) * per_group);
            std::fill(buf.dk.begin(), buf.dk.end(), 0.f);
            std::fill(buf.dv.begin(), buf.dv.end(), 0.f);
            for (int64_t t = first; t < last; ++t) {
                const int64_t in_group = t - g * per_group;
                const int64_t h = (g % p.Hkv) * p.group() + in_group / blocks;
                backward_block(p, args, g / p.Hkv, h, balanced_block(in_group % blocks, blocks), buf);
            }
            if (first == g * per_group && last == (g + 1) * per_group) {
                store_group(p, args, g, buf.dk.data(), buf.dv.data());
            } else {
                std::lock_guard<std::mutex> lock(mu);
                partials.push_back({g, first, buf.dk, buf.dv});
            }
        }
    });
    std::sort(partials.begin(), partials.end(), [](const Partial& a, const Partial& b) {
        return a.group != b.group ? a.group < b.group : a.first_task < b.first_task;
    });
    for (size_t i = 0; i < partials.size();) {
        Partial& sum = partials[i];
        size_t j = i + 1;
        for (; j < partials.size() && partials[j].group == sum.group; ++j) {
            for (size_t x = 0; x < sum.dk.size(); ++x) sum.dk[x] += partials[j].dk[x];
            for (size_t x = 0; x < sum.dv.size(); ++x) sum.dv[x] += partials[j].dv[x];
        }
        store_group(p, args, sum.group, sum.dk.data(), sum.dv.data());
        i = j;
    }
    return Status();
}

}  // namespace ember::kernels
