#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/norm/norm.h"
#include "norm_test_util.h"

namespace ember::kernels {
namespace {

using norm_test::expect_near_all;
using norm_test::random_values;
using norm_test::Tensor;

constexpr int64_t kNone = 0, kMean = 1, kSum = 2;

TensorView targets_view(std::vector<int64_t>& t) {
    TensorView v;
    v.data = t.data();
    v.dtype = DType::kInt64;
    v.ndim = 1;
    v.sizes[0] = static_cast<int64_t>(t.size());
    v.strides[0] = 1;
    return v;
}

struct Ref {
    std::vector<double> per_row;  // reduction none
    double sum = 0, total_weight = 0;
};

// w empty: unweighted.
Ref ref_nll(const std::vector<double>& logp, const std::vector<int64_t>& target, const std::vector<double>& w,
            int64_t classes, int64_t ignore_index) {
    Ref ref;
    for (size_t r = 0; r < target.size(); ++r) {
        const int64_t t = target[r];
        if (t == ignore_index) {
            ref.per_row.push_back(0);
            continue;
        }
        const double wt = w.empty() ? 1 : w[t];
        ref.per_row.push_back(-logp[r * classes + t] * wt);
        ref.sum += ref.per_row.back();
        ref.total_weight += wt;
    }
    return ref;
}

std::vector<int64_t> random_targets(int64_t rows, int64_t classes, int64_t ignore_index, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_int_distribution<int64_t> dist(0, classes - 1);
    std::vector<int64_t> t(rows);
    for (int64_t r = 0; r < rows; ++r) t[r] = r % 5 == 3 ? ignore_index : dist(gen);
    return t;
}

Tensor scalar(DType t, double v = 0) { return Tensor(t, {}, {v}); }

// Runs forward and backward for one configuration and checks both against the reference.
void check(DType t, int64_t reduction, bool weighted, int64_t ignore_index, runtime::ThreadPool* pool,
           int64_t rows = 23, int64_t classes = 7) {
    SCOPED_TRACE(testing::Message() << "reduction " << reduction << " weighted " << weighted << " ignore " << ignore_index);
    Tensor logp(t, {rows, classes}, random_values(rows * classes, -6, 0, 31));
    Tensor w(t, {classes}, random_values(classes, 0.1, 2, 32));
    std::vector<int64_t> target = random_targets(rows, classes, ignore_index, 33);
    TensorView wv = weighted ? w.view() : TensorView{};
    Tensor out = reduction == kNone ? Tensor(t, {rows}, std::vector<double>(rows, 9)) : scalar(t, 9);
    Tensor total = scalar(t, 9);
    ASSERT_TRUE(nll_loss(out.view(), total.view(), logp.view(), targets_view(target), wv, reduction, ignore_index, pool).ok());
    Ref ref = ref_nll(logp.values(), target, weighted ? w.values() : std::vector<double>{}, classes, ignore_index);
    const double tol = t == DType::kBFloat16 ? 1.0 / 128 : t == DType::kFloat32 ? 1e-6 : 1e-14;
    if (reduction == kNone) {
        expect_near_all(out.values(), ref.per_row, tol, 0);
        EXPECT_EQ(total.item(), 0.0) << "PyTorch leaves total_weight at 0 for reduction none";
    } else {
        EXPECT_NEAR(total.item(), ref.total_weight, tol * ref.total_weight);
        const double want = reduction == kMean ? ref.sum / ref.total_weight : ref.sum;
        EXPECT_NEAR(out.item(), want, tol * std::fabs(want));
    }

    Tensor grad_out = reduction == kNone ? Tensor(t, {rows}, random_values(rows, -1, 1, 34)) : scalar(t, 0.75);
    Tensor grad(t, {rows, classes}, std::vector<double>(rows * classes, 5));  // stale values must be cleared
    ASSERT_TRUE(nll_loss_backward(grad.view(), grad_out.view(), targets_view(target), wv, total.view(), reduction,
                                  ignore_index, pool).ok());
    std::vector<double> go = grad_out.values(), wvals = w.values(), want(rows * classes, 0);
    for (int64_t r = 0; r < rows; ++r) {
        if (target[r] == ignore_index) continue;
        double g = reduction == kNone ? go[r] : go[0];
        if (reduction == kMean) g /= total.item();
        want[r * classes + target[r]] = -(weighted ? wvals[target[r]] : 1) * g;
    }
    expect_near_all(grad.values(), want, tol, 0);
}

}  // namespace

TEST(NllLoss, EachReductionFloat32) {
    for (int64_t reduction : {kNone, kMean, kSum})
        for (bool weighted : {false, true}) check(DType::kFloat32, reduction, weighted, -100, nullptr);
}

TEST(NllLoss, IgnoreIndexInsideTheClassRange) {
    for (int64_t reduction : {kNone, kMean, kSum}) check(DType::kFloat32, reduction, true, 2, nullptr);
}

TEST(NllLoss, Float64AndBFloat16) {
    for (DType t : {DType::kFloat64, DType::kBFloat16})
        for (int64_t reduction : {kNone, kMean, kSum}) check(t, reduction, true, -100, nullptr);
}

TEST(NllLoss, MeanOverOnlyIgnoredRowsIsNaN) {
    Tensor logp(DType::kFloat32, {3, 4}, random_values(12, -3, 0, 1));
    std::vector<int64_t> target = {-100, -100, -100};
    Tensor out = scalar(DType::kFloat32), total = scalar(DType::kFloat32, 9);
    ASSERT_TRUE(nll_loss(out.view(), total.view(), logp.view(), targets_view(target), {}, kMean, -100, nullptr).ok());
    EXPECT_TRUE(std::isnan(out.item())) << "0 / 0, as in PyTorch";
    EXPECT_EQ(total.item(), 0.0);
    ASSERT_TRUE(nll_loss(out.view(), total.view(), logp.view(), targets_view(target), {}, kSum, -100, nullptr).ok());
    EXPECT_EQ(out.item(), 0.0);
}

TEST(NllLoss, OutOfRangeTargetIsAnError) {
    Tensor logp(DType::kFloat32, {3, 4}, random_values(12, -3, 0, 2));
    Tensor out(DType::kFloat32, {3}, {7, 7, 7}), total = scalar(DType::kFloat32), go = scalar(DType::kFloat32, 1);
    Tensor grad(DType::kFloat32, {3, 4}, std::vector<double>(12, 7));
    for (int64_t bad : {4, -1, 1000}) {
        std::vector<int64_t> target = {0, bad, 1};
        Status st = nll_loss(out.view(), total.view(), logp.view(), targets_view(target), {}, kNone, -100, nullptr);
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
        EXPECT_NE(st.message().find("Target " + std::to_string(bad) + " is out of bounds"), std::string::npos)
            << st.message();
        st = nll_loss_backward(grad.view(), go.view(), targets_view(target), {}, total.view(), kSum, -100, nullptr);
        EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    }
    EXPECT_EQ(out.values(), (std::vector<double>{7, 7, 7})) << "nothing is written before the check";
    EXPECT_EQ(grad.values(), std::vector<double>(12, 7));
    std::vector<int64_t> target = {0, -1, 1};
    EXPECT_TRUE(nll_loss(out.view(), total.view(), logp.view(), targets_view(target), {}, kNone, -1, nullptr).ok())
        << "an out-of-range value equal to ignore_index is fine";
}

TEST(NllLoss, RejectsBadArguments) {
    Tensor logp(DType::kFloat32, {3, 4}, std::vector<double>(12));
    Tensor out = scalar(DType::kFloat32), total = scalar(DType::kFloat32), w(DType::kFloat32, {5}, std::vector<double>(5));
    std::vector<int64_t> target = {0, 1, 2}, short_target = {0, 1};
    EXPECT_EQ(nll_loss(out.view(), total.view(), logp.view(), targets_view(target), {}, 3, -100, nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(nll_loss(out.view(), total.view(), logp.view(), targets_view(short_target), {}, kSum, -100, nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(nll_loss(out.view(), total.view(), logp.view(), targets_view(target), w.view(), kSum, -100, nullptr).code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(nll_loss(out.view(), total.view(), logp.view(), targets_view(target), {}, kNone, -100, nullptr).code(),
              StatusCode::kInvalidArgument)
        << "reduction none needs a [rows] output";
    TensorView float_target = logp.view();
    float_target.ndim = 1;
    float_target.sizes[0] = 3;
    EXPECT_EQ(nll_loss(out.view(), total.view(), logp.view(), float_target, {}, kSum, -100, nullptr).code(),
              StatusCode::kInvalidArgument);
}

TEST(NllLoss, ThreadPoolWithManyRowsMatchesSerial) {
    runtime::ThreadPool pool(4);
    for (int64_t reduction : {kNone, kMean, kSum}) check(DType::kFloat32, reduction, true, -100, &pool, 20000, 10);
    // Fixed row blocks make the sums independent of the thread count.
    const int64_t rows = 20000, classes = 10;
    Tensor logp(DType::kFloat32, {rows, classes}, random_values(rows * classes, -6, 0, 41));
    std::vector<int64_t> target = random_targets(rows, classes, -100, 42);
    Tensor a = scalar(DType::kFloat32), b = scalar(DType::kFloat32), ta = scalar(DType::kFloat32), tb = scalar(DType::kFloat32);
    ASSERT_TRUE(nll_loss(a.view(), ta.view(), logp.view(), targets_view(target), {}, kMean, -100, nullptr).ok());
    ASSERT_TRUE(nll_loss(b.view(), tb.view(), logp.view(), targets_view(target), {}, kMean, -100, &pool).ok());
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(ta.item(), 16000.0);
}

}  // namespace ember::kernels
