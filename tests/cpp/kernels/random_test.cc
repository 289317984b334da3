#include "kernels/random/random.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ember::kernels {
namespace {
TensorView vec(float* data, int64_t n, int64_t stride = 1) {
    TensorView v;
    v.data = data;
    v.dtype = DType::kFloat32;
    v.ndim = 1;
    v.sizes[0] = n;
    v.strides[0] = stride;
    return v;
}
}  // namespace

TEST(Philox, KnownAnswer) {
    // Philox-4x32-10 with counter 0 and key 0 (the Random123 known-answer test).
    uint32_t out[4];
    philox4x32(0, 0, out);
    EXPECT_EQ(out[0], 0x6627e8d5u);
    EXPECT_EQ(out[1], 0xe169c58du);
    EXPECT_EQ(out[2], 0xbc57ac4cu);
    EXPECT_EQ(out[3], 0x9b00dbd8u);
}

TEST(Random, ReproducibleAcrossThreadsAndOffsets) {
    runtime::ThreadPool pool(4);
    std::vector<float> a(1 << 20), b(1 << 20), c(1 << 20);
    PhiloxState s{42, 8};
    ASSERT_TRUE(uniform(vec(a.data(), a.size()), 0, 1, s, &pool).ok());
    ASSERT_TRUE(uniform(vec(b.data(), b.size()), 0, 1, s, nullptr).ok());
    EXPECT_EQ(a, b) << "numbers must not depend on the thread split";
    ASSERT_TRUE(uniform(vec(c.data(), c.size()), 0, 1, PhiloxState{42, 8 + uniform_draws(4)}, nullptr).ok());
    EXPECT_EQ(c[0], a[4]) << "advancing the offset continues the same stream";
}

TEST(Random, Distributions) {
    std::vector<float> u(200000), n(200000), bern(200000);
    ASSERT_TRUE(uniform(vec(u.data(), u.size()), -2, 3, PhiloxState{1, 0}, nullptr).ok());
    ASSERT_TRUE(normal(vec(n.data(), n.size()), 1.5, 2.0, PhiloxState{2, 0}, nullptr).ok());
    ASSERT_TRUE(bernoulli(vec(bern.data(), bern.size()), 0.3, PhiloxState{3, 0}, nullptr).ok());
    double su = 0, sn = 0, sn2 = 0, sb = 0;
    for (size_t i = 0; i < u.size(); ++i) {
        ASSERT_GE(u[i], -2.f);
        ASSERT_LT(u[i], 3.f);
        ASSERT_TRUE(bern[i] == 0.f || bern[i] == 1.f);
        su += u[i];
        sn += n[i];
        sn2 += (n[i] - 1.5) * (n[i] - 1.5);
        sb += bern[i];
    }
    double N = static_cast<double>(u.size());
    EXPECT_NEAR(su / N, 0.5, 0.02);
    EXPECT_NEAR(sn / N, 1.5, 0.02);
    EXPECT_NEAR(std::sqrt(sn2 / N), 2.0, 0.02);
    EXPECT_NEAR(sb / N, 0.3, 0.01);
}

TEST(Random, StridedOutputFollowsLogicalOrder) {
    std::vector<float> dense(8), strided(16, -1.f);
    ASSERT_TRUE(uniform(vec(dense.data(), 8), 0, 1, PhiloxState{9, 0}, nullptr).ok());
    ASSERT_TRUE(uniform(vec(strided.data(), 8, 2), 0, 1, PhiloxState{9, 0}, nullptr).ok());
    for (int i = 0; i < 8; ++i) {
        EXPECT_EQ(strided[2 * i], dense[i]);
        EXPECT_EQ(strided[2 * i + 1], -1.f);
    }
}

TEST(Random, GammaMomentsAndThreadIndependence) {
    // Gamma(a, 1) has mean a and variance a; the boosted branch (a < 1) and large a included.
    runtime::ThreadPool pool(4);
    for (float a : {0.2f, 1.0f, 40.0f}) {
        std::vector<float> alpha(100000, a), x(alpha.size()), y(alpha.size());
        ASSERT_TRUE(standard_gamma(vec(x.data(), x.size()), vec(alpha.data(), alpha.size()), PhiloxState{5, 0}, &pool).ok());
        ASSERT_TRUE(standard_gamma(vec(y.data(), y.size()), vec(alpha.data(), alpha.size()), PhiloxState{5, 0}, nullptr).ok());
        EXPECT_EQ(x, y) << "numbers must not depend on the thread split";
        double s = 0, s2 = 0;
        for (float v : x) {
            ASSERT_GT(v, 0.f);
            s += v;
        }
        const double mean = s / static_cast<double>(x.size());
        for (float v : x) s2 += (v - mean) * (v - mean);
        EXPECT_NEAR(mean, a, 0.02 * a + 0.002);
        EXPECT_NEAR(s2 / static_cast<double>(x.size()), a, 0.05 * a + 0.002);
    }
}

}  // namespace ember::kernels
