// Helpers for the compiler tests: random data, bf16 conversion, a reference GEMM provider (the
// real one is registered by the torch glue), and running an Executable on host vectors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compiler/compiler.h"
#include "kernels/gemm/gemm.h"

// Compiling needs the LLVM backend; a build with EMBER_WITH_LLVM=OFF skips these tests.
#define EMBER_REQUIRE_LLVM() \
    if (!::ember::compiler::llvm_available()) GTEST_SKIP() << "built with EMBER_WITH_LLVM=OFF"

namespace ember::compiler::test {

using kernels::DType;

inline std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<uint16_t> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = kernels::to_bfloat16(v[i]).bits;
    return r;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
    std::vector<float> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = kernels::to_float(kernels::BFloat16{v[i]});
    return r;
}

inline float read_elem(const kernels::TensorView& t, int64_t off) {
    const char* p = static_cast<const char*>(t.data);
    switch (t.dtype) {
        case DType::kFloat32: return reinterpret_cast<const float*>(p)[off];
        case DType::kFloat64: return static_cast<float>(reinterpret_cast<const double*>(p)[off]);
        case DType::kBFloat16: return kernels::to_float(reinterpret_cast<const kernels::BFloat16*>(p)[off]);
        default: return kernels::to_float(reinterpret_cast<const kernels::Half*>(p)[off]);
    }
}

inline void write_elem(const kernels::TensorView& t, int64_t off, float v) {
    char* p = static_cast<char*>(t.data);
    switch (t.dtype) {
        case DType::kFloat32: reinterpret_cast<float*>(p)[off] = v; break;
        case DType::kFloat64: reinterpret_cast<double*>(p)[off] = v; break;
        case DType::kBFloat16: reinterpret_cast<kernels::BFloat16*>(p)[off] = kernels::to_bfloat16(v); break;
        default: reinterpret_cast<kernels::Half*>(p)[off] = kernels::to_half(v); break;
    }
}

// Straightforward strided GEMM: the tests check the compiler's plumbing, not GEMM speed.
inline Status reference_gemm(const kernels::GemmArgs& g) {
    for (int64_t b = 0; b < g.c.sizes[0]; ++b)
        for (int64_t i = 0; i < g.c.sizes[1]; ++i)
            for (int64_t j = 0; j < g.c.sizes[2]; ++j) {
                double acc = 0;
                for (int64_t k = 0; k < g.a.sizes[2]; ++k)
                    acc += static_cast<double>(read_elem(g.a, b * g.a.strides[0] + i * g.a.strides[1] + k * g.a.strides[2])) *
                           read_elem(g.b, b * g.b.strides[0] + k * g.b.strides[1] + j * g.b.strides[2]);
                const int64_t co = b * g.c.strides[0] + i * g.c.strides[1] + j * g.c.strides[2];
                const double prev = g.beta != 0 ? read_elem(g.c, co) : 0.0;
                write_elem(g.c, co, static_cast<float>(g.alpha * acc + g.beta * prev));
            }
    return {};
}

inline void use_reference_gemm() { kernels::set_gemm_provider(&reference_gemm, "test-reference"); }

inline std::shared_ptr<const Executable> compile_ok(const Graph& g, CompileStats* stats = nullptr,
                                                    const CompileOptions& opts = {}) {
    auto exe = compile(g, opts, stats);
    EXPECT_TRUE(exe.ok()) << exe.status().message();
    return exe.ok() ? exe.value() : nullptr;
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, float atol, float rtol) {
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const float tol = atol + rtol * std::fabs(want[i]);
        if (!(std::fabs(got[i] - want[i]) <= tol) && bad++ < 5)
            ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
    EXPECT_EQ(bad, 0);
}

}  // namespace ember::compiler::test
