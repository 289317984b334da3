// reuse_values: softmax's exp is computed in one phase and read back in the next, only where the
// holding buffer is safe to use (an output of the value's own type, not an input).
#include <gtest/gtest.h>

#include "compiler/passes/passes.h"

namespace ember::compiler {
namespace {

using kernels::DType;

// How many phases of the plan's kernels evaluate an exp in their loop.
int phases_with_exp(const Plan& plan) {
    int count = 0;
    for (const Kernel& k : plan.kernels) {
        for (const Phase& p : k.phases) {
            std::vector<int> stack;
            for (const Store& s : p.stores) stack.push_back(s.expr);
            for (int r : p.reductions) stack.push_back(k.reductions[static_cast<size_t>(r)].expr);
            bool found = false;
            std::vector<char> seen(k.exprs.size(), 0);
            while (!stack.empty() && !found) {
                const int e = stack.back();
                stack.pop_back();
                if (e < 0 || seen[static_cast<size_t>(e)]) continue;
                seen[static_cast<size_t>(e)] = 1;
                const Expr& x = k.exprs[static_cast<size_t>(e)];
                found = x.kind == Expr::kOp && x.op == Op::kExp;
                if (x.kind != Expr::kReduced) stack.insert(stack.end(), std::begin(x.args), std::end(x.args));
            }
            count += found;
        }
    }
    return count;
}

Plan softmax_plan(DType dt, bool in_place) {
    Graph g;
    const int x = g.input(dt, {8, 100});
    Attrs a;
    a.ints = {-1};
    const int y = g.add(Op::kSoftmax, {x}, a, "attn.py:5");
    if (in_place) g.mark_output_alias(y, 0);
    else g.mark_output(y);
    auto lowered = decompose(g);
    EXPECT_TRUE(lowered.ok());
    auto plan = fuse(lowered.value());
    EXPECT_TRUE(plan.ok());
    Plan p = std::move(plan.value());
    EXPECT_EQ(phases_with_exp(p), 2);  // the sum's phase and the division's
    EXPECT_TRUE(reuse_values(p).ok());
    return p;
}

TEST(ReuseValues, SoftmaxComputesExpOnce) {
    EXPECT_EQ(phases_with_exp(softmax_plan(DType::kFloat32, false)), 1);
    EXPECT_EQ(phases_with_exp(softmax_plan(DType::kFloat64, false)), 1);
}

TEST(ReuseValues, KeepsBothWhereTheHolderWouldRoundOrAliasAnInput) {
    EXPECT_EQ(phases_with_exp(softmax_plan(DType::kBFloat16, false)), 2);  // bf16 output would round exp
    EXPECT_EQ(phases_with_exp(softmax_plan(DType::kFloat32, true)), 2);    // writing x would change phase 2's input
}

}  // namespace
}  // namespace ember::compiler
