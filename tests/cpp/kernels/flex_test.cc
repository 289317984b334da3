// FlexAttention's fused forward against a dense evaluation of the same score_mod and mask_mod,
// with a block mask that skips a block and marks another full; and the programs' checks.
#include "kernels/attention/flex.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ember::kernels::flex {
namespace {

TensorView view(void* data, DType dt, std::vector<int64_t> sizes) {
    TensorView v;
    v.data = data;
    v.dtype = dt;
    v.ndim = static_cast<int>(sizes.size());
    int64_t stride = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
        v.sizes[d] = sizes[static_cast<size_t>(d)];
        v.strides[d] = stride;
        stride *= v.sizes[d];
    }
    return v;
}

Instr ins(Op op, int32_t dst, int32_t a = -1, int32_t b = -1, int32_t c = -1) {
    Instr i;
    i.op = op, i.dst = dst, i.a = a, i.b = b, i.c = c;
    return i;
}

TEST(Flex, ForwardMatchesDenseScoresWithModsAndBlockSkips) {
    const int64_t H = 2, L = 20, D = 8, QB = 8, KB = 8, nb = 3;
    std::mt19937 rng(0);
    std::normal_distribution<float> nd;
    std::vector<float> q(H * L * D), k(H * L * D), v(H * L * D), out(H * L * D), lse(H * L), mx(H * L);
    for (auto* t : {&q, &k, &v})
        for (float& x : *t) x = nd(rng);
    // score_mod: score + 0.25 * (kv - q) (ALiBi-like); mask_mod: q >= kv (causal).
    Program score;
    score.constants = {0.25};
    score.code = {ins(Op::kScore, 0), ins(Op::kQuery, 1), ins(Op::kKey, 2), ins(Op::kSub, 3, 2, 1),
                  ins(Op::kConst, 4, -1, -1, 0), ins(Op::kMul, 5, 3, 4), ins(Op::kAdd, 6, 0, 5)};
    score.num_regs = 7, score.result = 6;
    Program mask;
    mask.code = {ins(Op::kQuery, 0), ins(Op::kKey, 1), ins(Op::kGe, 2, 0, 1)};
    mask.num_regs = 3, mask.result = 2;
    // Query block i lists key blocks < i as full, block i as partial: block i + 1 is skipped.
    std::vector<int32_t> num = {1, 1, 1}, idx = {0, 0, 0, 1, 0, 0, 2, 0, 0};
    std::vector<int32_t> fnum = {0, 1, 2}, fidx = {0, 0, 0, 0, 0, 0, 0, 1, 0};
    ForwardArgs a;
    a.p.q = view(q.data(), DType::kFloat32, {1, H, L, D});
    a.p.k = view(k.data(), DType::kFloat32, {1, H, L, D});
    a.p.v = view(v.data(), DType::kFloat32, {1, H, L, D});
    a.p.mask.kv_num_blocks = view(num.data(), DType::kInt32, {1, 1, nb});
    a.p.mask.kv_indices = view(idx.data(), DType::kInt32, {1, 1, nb, nb});
    a.p.mask.full_num_blocks = view(fnum.data(), DType::kInt32, {1, 1, nb});
    a.p.mask.full_indices = view(fidx.data(), DType::kInt32, {1, 1, nb, nb});
    a.p.mask.q_block = QB, a.p.mask.kv_block = KB;
    a.p.score_mod = &score, a.p.mask_mod = &mask, a.p.scale = 0.5;
    a.out = view(out.data(), DType::kFloat32, {1, H, L, D});
    a.lse = view(lse.data(), DType::kFloat32, {1, H, L});
    a.max = view(mx.data(), DType::kFloat32, {1, H, L});
    runtime::ThreadPool pool(2);
    ASSERT_TRUE(forward(a, &pool).ok());
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < L; ++i) {
            std::vector<double> s(L);
            double m = -INFINITY;
            for (int64_t j = 0; j < L; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < D; ++d) dot += q[(h * L + i) * D + d] * k[(h * L + j) * D + d];
                s[j] = j <= i ? 0.5 * dot + 0.25 * (j - i) : -INFINITY;
                m = std::max(m, s[j]);
            }
            double sum = 0;
            for (int64_t j = 0; j < L; ++j) sum += std::exp(s[j] - m);
            EXPECT_NEAR(lse[h * L + i] * std::log(2.0), m + std::log(sum), 1e-4) << h << " " << i;
            for (int64_t d = 0; d < D; ++d) {
                double o = 0;
                for (int64_t j = 0; j < L; ++j) o += std::exp(s[j] - m) / sum * v[(h * L + j) * D + d];
                EXPECT_NEAR(out[(h * L + i) * D + d], o, 1e-4) << h << " " << i << " " << d;
            }
        }
    }
}

TEST(Flex, ProgramsAreCheckedAndBadIndicesFailTheKernel) {
    Program p;
    p.code = {ins(Op::kAdd, 0, 5, 6)};
    p.num_regs = 1;
    EXPECT_FALSE(validate(p, "score_mod").ok()) << "operand registers out of range";
    // A load past the end of a 3-element buffer.
    std::vector<float> buf = {1.f, 2.f, 3.f};
    Program load;
    load.buffers = {view(buf.data(), DType::kFloat32, {3})};
    load.code = {ins(Op::kKey, 0), ins(Op::kLoad, 1, 0, -1, 0)};
    load.num_regs = 2, load.result = 1;
    ASSERT_TRUE(validate(load, "score_mod").ok());
    Evaluator ev(load);
    const double* out = nullptr;
    ASSERT_TRUE(ev.run({0, 0, 0, 0, 3}, nullptr, nullptr, &out).ok());
    EXPECT_EQ(out[2], 3.0);
    Status s = ev.run({0, 0, 0, 1, 3}, nullptr, nullptr, &out);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("out of bounds"), std::string::npos);
}

}  // namespace
}  // namespace ember::kernels::flex
