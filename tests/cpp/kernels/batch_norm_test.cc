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

constexpr int64_t kN = 3, kC = 4, kS = 10;

TEST(BatchNorm, TrainingMatchesDoubleReference) {
    Tensor x(DType::kFloat32, {kN, kC, kS}, random_values(kN * kC * kS, -2, 6, 1));
    Tensor w(DType::kFloat32, {kC}, random_values(kC, 0.5, 2, 2)), b(DType::kFloat32, {kC}, random_values(kC, -1, 1, 3));
    Tensor rm(DType::kFloat32, {kC}, std::vector<double>(kC, 0.0)), rv(DType::kFloat32, {kC}, std::vector<double>(kC, 1.0));
    Tensor out(DType::kFloat32, {kN, kC, kS}, std::vector<double>(kN * kC * kS)), mean(DType::kFloat32, {kC}, std::vector<double>(kC));
    Tensor invstd(DType::kFloat32, {kC}, std::vector<double>(kC));
    ASSERT_TRUE(batch_norm(out.view(), mean.view(), invstd.view(), x.view(), w.view(), b.view(), rm.view(), rv.view(),
                           true, 0.1, 1e-5, nullptr).ok());
    const std::vector<double> xv = x.values(), wv = w.values(), bv = b.values();
    std::vector<double> y(xv.size()), m(kC), is(kC), rmean(kC), rvar(kC);
    for (int64_t c = 0; c < kC; ++c) {
        double s = 0, v = 0;
        for (int64_t n = 0; n < kN; ++n)
            for (int64_t i = 0; i < kS; ++i) s += xv[(n * kC + c) * kS + i];
        m[c] = s / (kN * kS);
        for (int64_t n = 0; n < kN; ++n)
            for (int64_t i = 0; i < kS; ++i) v += std::pow(xv[(n * kC + c) * kS + i] - m[c], 2);
        is[c] = 1 / std::sqrt(v / (kN * kS) + 1e-5);
        rmean[c] = 0.1 * m[c];
        rvar[c] = 0.9 + 0.1 * v / (kN * kS - 1);
        for (int64_t n = 0; n < kN; ++n)
            for (int64_t i = 0; i < kS; ++i) {
                const int64_t k = (n * kC + c) * kS + i;
                y[k] = (xv[k] - m[c]) * is[c] * wv[c] + bv[c];
            }
    }
    expect_near_all(out.values(), y, 1e-5, 1e-5);
    expect_near_all(mean.values(), m, 1e-6, 1e-6);
    expect_near_all(invstd.values(), is, 1e-5, 1e-6);
    expect_near_all(rm.values(), rmean, 1e-6, 1e-6);
    expect_near_all(rv.values(), rvar, 1e-6, 1e-6);
}

TEST(BatchNorm, RefusesBadShapesAsValues) {
    Tensor x(DType::kFloat32, {kN, kC, kS}, std::vector<double>(kN * kC * kS, 1.0));
    Tensor out(DType::kFloat32, {kN, kC, kS}, std::vector<double>(kN * kC * kS));
    Tensor w(DType::kFloat32, {kC + 1}, std::vector<double>(kC + 1, 1.0));
    Status st = batch_norm(out.view(), {}, {}, x.view(), w.view(), {}, {}, {}, true, 0.1, 1e-5, nullptr);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("weight"), std::string::npos) << st.message();
    st = batch_norm(out.view(), {}, {}, x.view(), {}, {}, {}, {}, false, 0.1, 1e-5, nullptr);
    EXPECT_NE(st.message().find("running_mean"), std::string::npos) << st.message();
    Tensor mean(DType::kFloat32, {kC}, std::vector<double>(kC)), invstd(DType::kFloat32, {kC}, std::vector<double>(kC, 1));
    Tensor g2(DType::kFloat32, {kN, kC}, std::vector<double>(kN * kC));
    st = batch_norm_backward({}, {}, {}, g2.view(), x.view(), {}, mean.view(), invstd.view(), true, nullptr);
    EXPECT_NE(st.message().find("grad_output"), std::string::npos) << st.message();
}

TEST(BatchNorm, BackwardMatchesDoubleReference) {
    Tensor x(DType::kFloat64, {kN, kC, kS}, random_values(kN * kC * kS, -2, 6, 4));
    Tensor g(DType::kFloat64, {kN, kC, kS}, random_values(kN * kC * kS, -1, 1, 5));
    Tensor w(DType::kFloat64, {kC}, random_values(kC, 0.5, 2, 6));
    Tensor mean(DType::kFloat64, {kC}, random_values(kC, 1, 2, 7)), invstd(DType::kFloat64, {kC}, random_values(kC, 0.3, 1, 8));
    Tensor gi(DType::kFloat64, {kN, kC, kS}, std::vector<double>(kN * kC * kS));
    Tensor gw(DType::kFloat64, {kC}, std::vector<double>(kC)), gb(DType::kFloat64, {kC}, std::vector<double>(kC));
    ASSERT_TRUE(batch_norm_backward(gi.view(), gw.view(), gb.view(), g.view(), x.view(), w.view(), mean.view(),
                                    invstd.view(), true, nullptr).ok());
    const auto xv = x.values(), gv = g.values(), wv = w.values(), mv = mean.values(), iv = invstd.values();
    std::vector<double> dx(xv.size()), dw(kC), db(kC);
    const double count = kN * kS;
    for (int64_t c = 0; c < kC; ++c) {
        double sg = 0, sgx = 0;
        for (int64_t n = 0; n < kN; ++n)
            for (int64_t i = 0; i < kS; ++i) {
                const int64_t k = (n * kC + c) * kS + i;
                sg += gv[k];
                sgx += gv[k] * (xv[k] - mv[c]);
            }
        dw[c] = sgx * iv[c];
        db[c] = sg;
        for (int64_t n = 0; n < kN; ++n)
            for (int64_t i = 0; i < kS; ++i) {
                const int64_t k = (n * kC + c) * kS + i;
                dx[k] = iv[c] * wv[c] * (gv[k] - sg / count - (xv[k] - mv[c]) * iv[c] * iv[c] * sgx / count);
            }
    }
    expect_near_all(gi.values(), dx, 1e-12, 1e-12);
    expect_near_all(gw.values(), dw, 1e-12, 1e-12);
    expect_near_all(gb.values(), db, 1e-12, 1e-12);
}

}  // namespace
}  // namespace ember::kernels
