#include "kernels/attention/flex.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/elementwise/simd.h"
#include "kernels/gemm/gemm.h"
#include "torch_ember/vec_math.h"

namespace ember::kernels::flex {
namespace {

constexpr int64_t kRows = 64;  // query rows per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kLn2 = 0.69314718055994530942;

// C (m x n, ldc) = op(A) op(B) (+ C): the host's BLAS when registered, else a plain loop.
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    if (m == 0 || n == 0) return;
    if (BlockSgemm blas = block_sgemm()) return blas(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float s = accumulate ? c[i * ldc + j] : 0.f;
            for (int64_t p = 0; p < k; ++p) s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = s;
        }
    }
}

struct Shape {
    int64_t B, Hq, Lq, D, Bkv, Hkv, Lkv, Dv, group;
};

Status check(const Problem& p, Shape* s) {
    const TensorView &q = p.q, &k = p.k, &v = p.v;
    if (q.ndim != 4 || k.ndim != 4 || v.ndim != 4) return invalid_argument("flex_attention: q, k, v must be 4-d");
    for (const TensorView* t : {&q, &k, &v})
        if (t->dtype != DType::kFloat32 || !t->is_contiguous())
            return invalid_argument("flex_attention kernel: contiguous float32 q, k, v");
    *s = {q.sizes[0], q.sizes[1], q.sizes[2], q.sizes[3], k.sizes[0], k.sizes[1], k.sizes[2], v.sizes[3], 1};
    if (k.sizes[3] != s->D || v.sizes[0] != s->Bkv || v.sizes[1] != s->Hkv || v.sizes[2] != s->Lkv)
        return invalid_argument("flex_attention: q, k, v shapes do not match");
    if (s->Hkv == 0 || s->Hq % s->Hkv != 0) return invalid_argument("flex_attention: query heads must be a multiple of key heads");
    if (s->Bkv != s->B && s->Bkv != 1) return invalid_argument("flex_attention: the key batch must be the query's or 1");
    s->group = s->Hq / s->Hkv;
    const BlockMask& m = p.mask;
    if (m.q_block <= 0 || m.kv_block <= 0) return invalid_argument("flex_attention: block sizes must be positive");
    if (m.kv_num_blocks.ndim != 3 || m.kv_indices.ndim != 4 || m.kv_num_blocks.dtype != DType::kInt32 ||
        m.kv_indices.dtype != DType::kInt32)
        return invalid_argument("flex_attention: the block mask's kv_num_blocks / kv_indices must be int32 (B, H, nQ[, n])");
    if (m.full_num_blocks.data != nullptr &&
        (m.full_num_blocks.ndim != 3 || m.full_indices.ndim != 4 || m.full_num_blocks.dtype != DType::kInt32 ||
         m.full_indices.dtype != DType::kInt32))
        return invalid_argument("flex_attention: the block mask's full blocks must be int32 (B, H, nQ[, n])");
    if (p.score_mod && !p.score_mod->empty()) EMBER_RETURN_IF_ERROR(validate(*p.score_mod, "score_mod"));
    if (p.mask_mod && !p.mask_mod->empty()) EMBER_RETURN_IF_ERROR(validate(*p.mask_mod, "mask_mod"));
    return Status();
}

// Element (i0, i1, ...) of an int32 view whose leading dims may broadcast (size 1).
int32_t at(const TensorView& t, int64_t b, int64_t h, int64_t qb, int64_t j = 0) {
    const int64_t idx[4] = {t.sizes[0] == 1 ? 0 : b, t.sizes[1] == 1 ? 0 : h, qb, j};
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d) off += idx[d] * t.strides[d];
    return static_cast<const int32_t*>(t.data)[off];
}

// One stretch of keys to visit: [j0, j0 + n), and whether mask_mod applies (a partial block).
struct Chunk {
    int64_t j0, n;
    bool partial;
};

// The key chunks (at most kFlexLanes keys each) the block mask lists for query block qb of
// (b, h), partial blocks first, each within [0, Lkv).
std::vector<Chunk> chunks_of(const BlockMask& m, int64_t b, int64_t h, int64_t qb, int64_t Lkv) {
    std::vector<Chunk> out;
    auto add = [&](const TensorView& num, const TensorView& idx, bool partial) {
        if (num.data == nullptr || qb >= num.sizes[2]) return;
        const int64_t count = std::min<int64_t>(at(num, b, h, qb), idx.sizes[3]);
        for (int64_t t = 0; t < count; ++t) {
            const int64_t blk = at(idx, b, h, qb, t);
            const int64_t lo = blk * m.kv_block, hi = std::min(Lkv, lo + m.kv_block);
            for (int64_t j = std::max<int64_t>(lo, 0); j < hi; j += kFlexLanes)
                out.push_back({j, std::min(kFlexLanes, hi - j), partial});
        }
    };
    add(m.kv_num_blocks, m.kv_indices, true);
    add(m.full_num_blocks, m.full_indices, false);
    return out;
}

// The per-row loops, in SIMD clones so that they vectorize on every CPU.
EMBER_SIMD_CLONES void scale_row(float* row, const float* src, float scale, int64_t n) {
    for (int64_t i = 0; i < n; ++i) row[i] = src[i] * scale;
}
EMBER_SIMD_CLONES void narrow(float* row, const double* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) row[i] = static_cast<float>(v[i]);
}
EMBER_SIMD_CLONES void apply_mask(float* row, uint8_t* keep, const double* m, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        keep[i] = m[i] != 0;
        row[i] = m[i] != 0 ? row[i] : kNegInf;
    }
}
EMBER_SIMD_CLONES float row_max(const float* row, int64_t n) {
    float mx = kNegInf;
    for (int64_t i = 0; i < n; ++i) mx = row[i] > mx ? row[i] : mx;
    return mx;
}
// row = exp(row - m); returns the sum.
EMBER_SIMD_CLONES float exp_row(float* row, float m, int64_t n) {
    float sum = 0.f;
    for (int64_t i = 0; i < n; ++i) {
        row[i] = vmath::exp(row[i] - m);
        sum += row[i];
    }
    return sum;
}
EMBER_SIMD_CLONES void scale_vec(float* x, float a, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] *= a;
}
// P = exp(S - lse), or 0 in a row no key reaches (lse = -inf).
EMBER_SIMD_CLONES void probabilities(float* row, float lse, int64_t n) {
    for (int64_t i = 0; i < n; ++i) row[i] = lse == kNegInf ? 0.f : vmath::exp(row[i] - lse);
}
// dS = P (dP - delta + dlse)
EMBER_SIMD_CLONES void score_grad(float* g, const float* p, float shift, int64_t n) {
    for (int64_t i = 0; i < n; ++i) g[i] = p[i] * (g[i] + shift);
}
EMBER_SIMD_CLONES void masked_scale(float* g, const uint8_t* keep, float scale, int64_t n) {
    for (int64_t i = 0; i < n; ++i) g[i] = keep[i] ? g[i] * scale : 0.f;
}
EMBER_SIMD_CLONES float dot(const float* a, const float* b, int64_t n) {
    float s = 0.f;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

bool has(const Program* p) { return p != nullptr && !p->empty(); }
const Program& or_empty(const Program* p) {
    static const Program kEmpty;
    return has(p) ? *p : kEmpty;
}

// Scores of rows [r0, r0 + nr) against one chunk: scaled, modified, masked (-inf), in S (ld
// kFlexLanes). `raw`, when given, keeps the scaled scores before score_mod (the backward's input
// to the gradient program); `keep`, when given, records the mask.
Status scores(const Problem& p, const Shape& s, int64_t b, int64_t h, int64_t r0, int64_t nr, const Chunk& c,
              const float* q, const float* k, float* S, float* raw, uint8_t* keep, Evaluator* score_eval,
              Evaluator* mask_eval) {
    sgemm(false, true, nr, c.n, s.D, q, s.D, k, s.D, S, kFlexLanes, false);
    const float scale = static_cast<float>(p.scale);
    uint8_t scratch[kFlexLanes];
    for (int64_t r = 0; r < nr; ++r) {
        float* row = S + r * kFlexLanes;
        scale_row(row, row, scale, c.n);
        if (raw) std::copy(row, row + c.n, raw + r * kFlexLanes);
        const RowPos pos{b, h, r0 + r, c.j0, c.n};
        if (score_eval) {
            const double* out = nullptr;
            EMBER_RETURN_IF_ERROR(score_eval->run(pos, row, nullptr, &out));
            narrow(row, out, c.n);
        }
        uint8_t* kr = keep ? keep + r * kFlexLanes : scratch;
        if (c.partial && mask_eval) {
            const double* out = nullptr;
            EMBER_RETURN_IF_ERROR(mask_eval->run(pos, nullptr, nullptr, &out));
            apply_mask(row, kr, out, c.n);
        } else if (keep) {
            std::fill(kr, kr + c.n, uint8_t{1});
        }
    }
    return Status();
}

// Runs fn(task) for tasks [0, n), over the pool when there is one; returns the first error.
template <typename F>
Status for_tasks(int64_t n, runtime::ThreadPool* pool, F&& fn) {
    if (pool != nullptr) return pool->for_each_item(n, [&](int64_t t, runtime::ThreadPool*) { return fn(t); });
    for (int64_t t = 0; t < n; ++t) EMBER_RETURN_IF_ERROR(fn(t));
    return Status();
}

}  // namespace

Status forward(const ForwardArgs& a, runtime::ThreadPool* pool) {
    const Problem& p = a.p;
    Shape s;
    EMBER_RETURN_IF_ERROR(check(p, &s));
    const int64_t nq = (s.Lq + p.mask.q_block - 1) / p.mask.q_block;
    const float* Q = static_cast<const float*>(p.q.data);
    const float* K = static_cast<const float*>(p.k.data);
    const float* V = static_cast<const float*>(p.v.data);
    float* O = static_cast<float*>(a.out.data);
    float* LSE = static_cast<float*>(a.lse.data);
    float* MX = static_cast<float*>(a.max.data);
    return for_tasks(s.B * s.Hq * nq, pool, [&](int64_t task) -> Status {
        const int64_t qb = task % nq, h = (task / nq) % s.Hq, b = task / (nq * s.Hq);
        const int64_t kvh = h / s.group, bk = s.Bkv == 1 ? 0 : b;
        const float* k = K + (bk * s.Hkv + kvh) * s.Lkv * s.D;
        const float* v = V + (bk * s.Hkv + kvh) * s.Lkv * s.Dv;
        const std::vector<Chunk> chunks = chunks_of(p.mask, b, h, qb, s.Lkv);
        std::vector<float> S(kRows * kFlexLanes), acc(static_cast<size_t>(kRows * s.Dv));
        float m[kRows], l[kRows];
        Evaluator score_eval(or_empty(p.score_mod)), mask_eval(or_empty(p.mask_mod));
        const int64_t i_end = std::min(s.Lq, (qb + 1) * p.mask.q_block);
        for (int64_t r0 = qb * p.mask.q_block; r0 < i_end; r0 += kRows) {
            const int64_t nr = std::min(kRows, i_end - r0);
            const int64_t row_base = (b * s.Hq + h) * s.Lq + r0;
            std::fill(m, m + nr, kNegInf);
            std::fill(l, l + nr, 0.f);
            std::fill(acc.begin(), acc.end(), 0.f);
            for (const Chunk& c : chunks) {
                EMBER_RETURN_IF_ERROR(scores(p, s, b, h, r0, nr, c, Q + row_base * s.D, k + c.j0 * s.D, S.data(), nullptr,
                                             nullptr, has(p.score_mod) ? &score_eval : nullptr,
                                             has(p.mask_mod) ? &mask_eval : nullptr));
                for (int64_t r = 0; r < nr; ++r) {
                    float* row = S.data() + r * kFlexLanes;
                    const float mnew = std::max(m[r], row_max(row, c.n));
                    if (mnew == kNegInf) {  // nothing unmasked in this row yet
                        std::fill(row, row + c.n, 0.f);
                        continue;
                    }
                    const float alpha = vmath::exp(m[r] - mnew);
                    l[r] = l[r] * alpha + exp_row(row, mnew, c.n);
                    m[r] = mnew;
                    if (alpha != 1.f) scale_vec(acc.data() + r * s.Dv, alpha, s.Dv);
                }
                sgemm(false, false, nr, s.Dv, c.n, S.data(), kFlexLanes, v + c.j0 * s.Dv, s.Dv, acc.data(), s.Dv, true);
            }
            for (int64_t r = 0; r < nr; ++r) {
                float* o = O + (row_base + r) * s.Dv;
                const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
                for (int64_t d = 0; d < s.Dv; ++d) o[d] = acc[static_cast<size_t>(r * s.Dv + d)] * inv;
                LSE[row_base + r] = l[r] > 0.f ? static_cast<float>((m[r] + std::log(l[r])) / kLn2) : kNegInf;
                MX[row_base + r] = m[r] == kNegInf ? kNegInf : static_cast<float>(m[r] / kLn2);
            }
        }
        return Status();
    });
}

Status backward(const BackwardArgs& a, runtime::ThreadPool* pool) {
    const Problem& p = a.p;
    Shape s;
    EMBER_RETURN_IF_ERROR(check(p, &s));
    if (has(p.score_mod) && !has(a.score_grad))
        return invalid_argument("flex_attention backward: a score_mod needs its gradient program");
    if (has(a.score_grad)) EMBER_RETURN_IF_ERROR(validate(*a.score_grad, "score_mod gradient"));
    const int64_t nq = (s.Lq + p.mask.q_block - 1) / p.mask.q_block;
    const float* Q = static_cast<const float*>(p.q.data);
    const float* K = static_cast<const float*>(p.k.data);
    const float* V = static_cast<const float*>(p.v.data);
    const float* O = static_cast<const float*>(a.out.data);
    const float* dO = static_cast<const float*>(a.grad_out.data);
    const float* LSE = static_cast<const float*>(a.lse.data);
    const float* dLSE = static_cast<const float*>(a.grad_lse.data);
    float* dQ = static_cast<float*>(a.dq.data);
    float* dK = static_cast<float*>(a.dk.data);
    float* dV = static_cast<float*>(a.dv.data);
    std::fill(dQ, dQ + s.B * s.Hq * s.Lq * s.D, 0.f);
    std::fill(dK, dK + s.Bkv * s.Hkv * s.Lkv * s.D, 0.f);
    std::fill(dV, dV + s.Bkv * s.Hkv * s.Lkv * s.Dv, 0.f);
    // Gradients of captured tensors: each task adds into copies of its own, merged at its end.
    const std::vector<TensorView> no_grads;
    const std::vector<TensorView>& buffer_grads = has(a.score_grad) ? a.score_grad->grads : no_grads;
    for (const TensorView& g : buffer_grads) std::fill(static_cast<float*>(g.data), static_cast<float*>(g.data) + g.numel(), 0.f);
    std::mutex merge;
    // A task owns one key/value head (of one batch, or of all when the key batch broadcasts), so
    // the dK and dV rows it accumulates are its own; the dQ rows of its query heads are too.
    const int64_t batch_tasks = s.Bkv == 1 ? 1 : s.B;
    return for_tasks(batch_tasks * s.Hkv, pool, [&](int64_t task) -> Status {
        const int64_t kvh = task % s.Hkv, bt = task / s.Hkv;
        const int64_t bk = s.Bkv == 1 ? 0 : bt;
        const float* k = K + (bk * s.Hkv + kvh) * s.Lkv * s.D;
        const float* v = V + (bk * s.Hkv + kvh) * s.Lkv * s.Dv;
        float* dk = dK + (bk * s.Hkv + kvh) * s.Lkv * s.D;
        float* dv = dV + (bk * s.Hkv + kvh) * s.Lkv * s.Dv;
        std::vector<float> S(kRows * kFlexLanes), raw(kRows * kFlexLanes), dP(kRows * kFlexLanes);
        std::vector<uint8_t> keep(kRows * kFlexLanes);
        float lse[kRows], delta[kRows], glse[kRows];
        Evaluator score_eval(or_empty(p.score_mod)), mask_eval(or_empty(p.mask_mod)), grad_eval(or_empty(a.score_grad));
        std::vector<std::vector<float>> local;
        std::vector<float*> local_ptrs;
        for (const TensorView& g : buffer_grads) local.emplace_back(static_cast<size_t>(g.numel()), 0.f);
        for (auto& l : local) local_ptrs.push_back(l.data());
        const int64_t b_lo = s.Bkv == 1 ? 0 : bt, b_hi = s.Bkv == 1 ? s.B : bt + 1;
        for (int64_t b = b_lo; b < b_hi; ++b) {
            for (int64_t h = kvh * s.group; h < (kvh + 1) * s.group; ++h) {
                for (int64_t qb = 0; qb < nq; ++qb) {
                    const std::vector<Chunk> chunks = chunks_of(p.mask, b, h, qb, s.Lkv);
                    if (chunks.empty()) continue;
                    const int64_t i_end = std::min(s.Lq, (qb + 1) * p.mask.q_block);
                    for (int64_t r0 = qb * p.mask.q_block; r0 < i_end; r0 += kRows) {
                        const int64_t nr = std::min(kRows, i_end - r0);
                        const int64_t row_base = (b * s.Hq + h) * s.Lq + r0;
                        const float* q = Q + row_base * s.D;
                        const float* go = dO + row_base * s.Dv;
                        float* dq = dQ + row_base * s.D;
                        for (int64_t r = 0; r < nr; ++r) {
                            lse[r] = static_cast<float>(LSE[row_base + r] * kLn2);
                            glse[r] = dLSE ? static_cast<float>(dLSE[row_base + r] / kLn2) : 0.f;
                            delta[r] = dot(go + r * s.Dv, O + (row_base + r) * s.Dv, s.Dv);
                        }
                        for (const Chunk& c : chunks) {
                            EMBER_RETURN_IF_ERROR(scores(p, s, b, h, r0, nr, c, q, k + c.j0 * s.D, S.data(), raw.data(),
                                                         keep.data(), has(p.score_mod) ? &score_eval : nullptr,
                                                         has(p.mask_mod) ? &mask_eval : nullptr));
                            for (int64_t r = 0; r < nr; ++r)  // S becomes the probabilities P
                                probabilities(S.data() + r * kFlexLanes, lse[r], c.n);
                            sgemm(true, false, c.n, s.Dv, nr, S.data(), kFlexLanes, go, s.Dv, dv + c.j0 * s.Dv, s.Dv, true);
                            sgemm(false, true, nr, c.n, s.Dv, go, s.Dv, v + c.j0 * s.Dv, s.Dv, dP.data(), kFlexLanes, false);
                            for (int64_t r = 0; r < nr; ++r) {  // dP becomes the gradient of the scores
                                float* g = dP.data() + r * kFlexLanes;
                                score_grad(g, S.data() + r * kFlexLanes, glse[r] - delta[r], c.n);
                                if (has(a.score_grad)) {
                                    const double* out = nullptr;
                                    EMBER_RETURN_IF_ERROR(grad_eval.run({b, h, r0 + r, c.j0, c.n}, raw.data() + r * kFlexLanes, g, &out));
                                    if (!local.empty()) EMBER_RETURN_IF_ERROR(grad_eval.scatter(c.n, local_ptrs.data()));
                                    narrow(g, out, c.n);
                                }
                                masked_scale(g, keep.data() + r * kFlexLanes, static_cast<float>(p.scale), c.n);
                            }
                            sgemm(false, false, nr, s.D, c.n, dP.data(), kFlexLanes, k + c.j0 * s.D, s.D, dq, s.D, true);
                            sgemm(true, false, c.n, s.D, nr, dP.data(), kFlexLanes, q, s.D, dk + c.j0 * s.D, s.D, true);
                        }
                    }
                }
            }
        }
        std::lock_guard<std::mutex> lock(merge);
        for (size_t i = 0; i < local.size(); ++i) {
            float* out = static_cast<float*>(buffer_grads[i].data);
            for (size_t j = 0; j < local[i].size(); ++j) out[j] += local[i][j];
        }
        return Status();
    });
}

}  // namespace ember::kernels::flex
