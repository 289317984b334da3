#include <gtest/gtest.h>

#include "compiler/compiler.h"

namespace ember::compiler {
namespace {

using kernels::DType;

TEST(CompilerVerifier, ListsEveryUnsupportedOpWithItsSource) {
    Graph g;
    const int x = g.input(DType::kFloat32, {4, 4});
    const int a = g.add_opaque("aten.nonzero", {x}, DType::kInt64, {16, 2}, "model.py:12");
    const int b = g.add(Op::kExp, {x}, {}, "model.py:13");
    const int c = g.add_opaque("aten.unique", {b}, DType::kFloat32, {4}, "model.py:14");
    g.mark_output(a);
    g.mark_output(c);
    Status st = verify(g);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
    EXPECT_NE(st.message().find("op 'aten.nonzero' at model.py:12"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("op 'aten.unique' at model.py:14"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find("model.py:13"), std::string::npos) << st.message();
    auto exe = compile(g, {});
    EXPECT_EQ(exe.status().code(), StatusCode::kUnimplemented);
}

TEST(CompilerVerifier, RejectsShapesThatDoNotFollowFromTheOp) {
    Graph g;
    const int x = g.input(DType::kFloat32, {4, 4});
    g.mark_output(g.add(Op::kExp, {x}, {}, DType::kFloat32, {4, 5}, "model.py:3"));
    Status st = verify(g);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("model.py:3"), std::string::npos);
}

TEST(CompilerVerifier, InfersBroadcastAndPromotion) {
    Graph g;
    const int x = g.input(DType::kBFloat16, {3, 1, 5});
    const int y = g.input(DType::kFloat32, {4, 1});
    const int z = g.add(Op::kAdd, {x, y});
    EXPECT_EQ(g.node(z).sizes, (std::vector<int64_t>{3, 4, 5}));
    EXPECT_EQ(g.node(z).dtype, DType::kFloat32);
    const int w = g.add(Op::kMul, {x, g.scalar(2.0)});
    EXPECT_EQ(g.node(w).dtype, DType::kBFloat16);
    g.mark_output(z);
    EXPECT_TRUE(verify(g).ok());
}

TEST(CompilerVerifier, WithoutLlvmCompileSaysSo) {
    if (llvm_available()) GTEST_SKIP() << "built with LLVM";
    Graph g;
    g.mark_output(g.add(Op::kExp, {g.input(DType::kFloat32, {2})}));
    auto exe = compile(g, {});
    EXPECT_EQ(exe.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(exe.status().message().find("EMBER_WITH_LLVM"), std::string::npos);
}

}  // namespace
}  // namespace ember::compiler
