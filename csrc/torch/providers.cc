// The library kernels behind core's narrow provider interfaces, from the libraries inside
// libtorch, reached through CPU tensor aliases of device memory (the host executor's device
// memory is host memory; a real chip would register its own providers):
//  - kernels::gemm: MKL for float32, oneDNN with AMX/AVX-512 for bfloat16 and float16 where the
//    CPU has their dot-product instructions; elsewhere 16-bit products are widened to float32 and
//    run as MKL sgemm (compute_operand, widened_gemm). Chosen by measurement (bench/matmul.py).
//  - kernels::conv: oneDNN convolution, forward and backward; 16-bit ones widened to float32 like
//    the products where the CPU lacks the 16-bit instructions.
//  - kernels lapack (Cholesky, LU and their solves): the LAPACK routines libtorch exports (MKL's).
#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "context.h"
#include "kernels/conv/conv.h"
#include "kernels/gemm/gemm.h"
#include "kernels/linalg/lapack.h"

// OpenMP's per-thread team size (the OpenMP runtime libtorch loads), which MKL and oneDNN follow.
extern "C" void omp_set_num_threads(int n);

// LAPACK's Fortran entry points, as libtorch exports them (LP64: 32-bit integers).
extern "C" {
void spotrf_(const char* uplo, const int* n, float* a, const int* lda, int* info);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);
void spotrs_(const char* uplo, const int* n, const int* nrhs, const float* a, const int* lda, float* b, const int* ldb,
             int* info);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b,
             const int* ldb, int* info);
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c, const int* ldc);
void sgetrf_(const int* m, const int* n, float* a, const int* lda, int* ipiv, int* info);
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void sgetrs_(const char* trans, const int* n, const int* nrhs, const float* a, const int* lda, const int* ipiv,
             float* b, const int* ldb, int* info);
void dgetrs_(const char* trans, const int* n, const int* nrhs, const double* a, const int* lda, const int* ipiv,
             double* b, const int* ldb, int* info);
}

namespace ember::torch_glue {
namespace {

// The OpenMP team a library call from this device thread may use (the setting is per thread).
void set_team(int n) {
    thread_local int current = -1;
    if (n == current) return;
    current = n;
    omp_set_num_threads(n);
}

// GEMMs run single-threaded on the calling device thread: kernels::gemm splits large products
// across the device's pool itself, and a library thread team would compete with the pool's
// threads for the cores. Convolutions of a batch are split the same way (kernels::conv asks for
// one thread); a single sample uses a team when it is large enough to pay for waking it
// (bench/matmul.py measured the crossover for products).
void team_for_conv(double flops) {
    set_team(flops < (1 << 24) ? 1 : static_cast<int>(std::thread::hardware_concurrency()));
}

c10::ScalarType scalar_type(kernels::DType t) {
    switch (t) {
        case kernels::DType::kFloat64: return at::kDouble;
        case kernels::DType::kBFloat16: return at::kBFloat16;
        case kernels::DType::kFloat16: return at::kHalf;
        default: return at::kFloat;
    }
}

at::Tensor host_alias(const kernels::TensorView& v) {
    return at::from_blob(v.data, c10::IntArrayRef(v.sizes, v.ndim), c10::IntArrayRef(v.strides, v.ndim),
                         at::TensorOptions().dtype(scalar_type(v.dtype)).device(c10::kCPU));
}

// Whether the CPU multiplies this 16-bit type natively (AVX512-BF16 / AMX-BF16, AVX512-FP16).
// Without those instructions libtorch's bfloat16 and float16 products and convolutions take a
// scalar fallback, about 100x slower than float32 (1024^3 mm: 1.1 s against 12 ms on an AVX2 EPYC).
bool native_half(c10::ScalarType t) {
    static const bool bf16 = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
    static const bool f16 = __builtin_cpu_supports("avx512fp16");
    return t == at::kBFloat16 ? bf16 : t == at::kHalf ? f16 : true;
}

// An operand as the library computes it: as stored, or widened (exactly) to float32 where the CPU
// has no native arithmetic for its 16-bit type; the result is rounded once when copied into the
// 16-bit output. An operand broadcast over its first dim (stride 0) is widened once.
at::Tensor compute_operand(const at::Tensor& t, bool widen = false) {
    if (!widen && native_half(t.scalar_type())) return t;
    if (t.dim() > 0 && t.size(0) > 1 && t.stride(0) == 0) {
        return t[0].to(at::kFloat).unsqueeze(0).expand(t.sizes());
    }
    return t.to(at::kFloat);
}

// Whether some element of a bfloat16 view is inf or NaN (all exponent bits set). Which elements
// does not depend on their order, so the dims are walked in memory order (a transposed weight
// reads contiguously), and a row's largest exponent field decides (the loop vectorizes).
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
uint16_t top_exponent(const uint16_t* p, int64_t n, int64_t step) {
    uint16_t top = 0;
    if (step == 1) {
        for (int64_t i = 0; i < n; ++i) top = std::max<uint16_t>(top, p[i] & 0x7f80);
    } else {
        for (int64_t i = 0; i < n; ++i) top = std::max<uint16_t>(top, p[i * step] & 0x7f80);
    }
    return top;
}

bool has_non_finite_bf16(const kernels::TensorView& v) {
    if (v.dtype != kernels::DType::kBFloat16 || v.numel() == 0) return false;
    std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size), largest stride first
    for (int d = 0; d < v.ndim; ++d)
        if (v.sizes[d] > 1) dims.emplace_back(v.strides[d], v.sizes[d]);
    std::sort(dims.begin(), dims.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    const int64_t n = dims.empty() ? 1 : dims.back().second, step = dims.empty() ? 1 : dims.back().first;
    if (!dims.empty()) dims.pop_back();
    int64_t rows = 1;
    for (const auto& d : dims) rows *= d.second;
    const auto* base = static_cast<const uint16_t*>(v.data);
    for (int64_t r = 0; r < rows; ++r) {
        int64_t off = 0, rest = r;
        for (size_t d = dims.size(); d-- > 0;) {
            off += (rest % dims[d].second) * dims[d].first;
            rest /= dims[d].second;
        }
        if (top_exponent(base + off, n, step) == 0x7f80) return true;
    }
    return false;
}

// oneDNN's bfloat16 kernels (AMX / AVX512-BF16) read past the end of a row of A when K is not a
// multiple of their block and multiply the extra values by zeros: a NaN or inf at the start of
// row i of A turned row i-1 of C into NaN (17 x 80 @ 80 x 19), and likewise neighbouring pixels
// of some convolutions (3 or 7 input channels, 3x3 or 7x7 kernels). Operands holding inf or NaN
// therefore take the widened float32 path, which has no such reads; finite ones, the fast one.
bool leaks_non_finite(const kernels::TensorView& a, const kernels::TensorView& b) {
    return has_non_finite_bf16(a) || has_non_finite_bf16(b);
}

// C = beta C + alpha A B with A and B widened: the products accumulate in float32 (as every
// 16-bit GEMM's do) and C rounds once to its 16-bit type.
void widened_gemm(const kernels::GemmArgs& g, const at::Tensor& a, const at::Tensor& b, at::Tensor& c) {
    at::Tensor af = compute_operand(a, true), bf = compute_operand(b, true);
    at::Tensor cf = g.beta == 0 ? at::bmm(af, bf) : c.to(at::kFloat).baddbmm_(af, bf, g.beta, g.alpha);
    if (g.beta == 0 && g.alpha != 1) cf.mul_(g.alpha);
    c.copy_(cf);
}

Status libtorch_gemm(const kernels::GemmArgs& g) {
    // The libtorch calls below are how this kernel is implemented, not op calls of the program:
    // keep them out of profilers' op records (and skip their callback cost).
    at::DisableRecordFunctionGuard no_record;
    set_team(1);
    try {
        at::Tensor a = host_alias(g.a), b = host_alias(g.b), c = host_alias(g.c);
        if (!native_half(a.scalar_type()) || leaks_non_finite(g.a, g.b)) {
            widened_gemm(g, a, b, c);
            return Status();
        }
        if (a.size(0) == 1) {
            at::Tensor c0 = c[0];
            if (g.beta == 0 && g.alpha == 1) at::mm_out(c0, a[0], b[0]);
            else c0.addmm_(a[0], b[0], g.beta, g.alpha);
        } else {
            if (g.beta == 0 && g.alpha == 1) at::bmm_out(c, a, b);
            else c.baddbmm_(a, b, g.beta, g.alpha);
        }
    } catch (const std::exception& e) {
        return internal_error(std::string("gemm: ") + e.what());
    }
    return Status();
}

std::vector<int64_t> vec(const int64_t* v, int n) { return std::vector<int64_t>(v, v + n); }

// Multiply-adds of a convolution: every output element reads in_channels/groups x kernel taps.
double conv_flops(const kernels::TensorView& out, const kernels::TensorView& weight) {
    double taps = 1;
    for (int d = 1; d < weight.ndim; ++d) taps *= static_cast<double>(weight.sizes[d]);
    double n = 1;
    for (int d = 0; d < out.ndim; ++d) n *= static_cast<double>(out.sizes[d]);
    return 2.0 * n * taps;
}

Status libtorch_conv(const kernels::ConvArgs& a) {
    at::DisableRecordFunctionGuard no_record;
    if (a.threads == 1) set_team(1);
    else team_for_conv(conv_flops(a.out, a.weight));
    try {
        const auto& p = a.params;
        const bool widen = leaks_non_finite(a.input, a.weight);
        at::Tensor bias = a.bias.data ? compute_operand(host_alias(a.bias), widen) : at::Tensor();
        at::Tensor r = at::convolution(compute_operand(host_alias(a.input), widen),
                                       compute_operand(host_alias(a.weight), widen),
                                       bias, vec(p.stride, p.spatial), vec(p.padding, p.spatial),
                                       vec(p.dilation, p.spatial), p.transposed, vec(p.output_padding, p.spatial),
                                       p.groups);
        host_alias(a.out).copy_(r);
    } catch (const std::exception& e) {
        return internal_error(std::string("conv: ") + e.what());
    }
    return Status();
}

Status libtorch_conv_backward(const kernels::ConvBackwardArgs& a) {
    at::DisableRecordFunctionGuard no_record;
    if (a.threads == 1) set_team(1);
    else team_for_conv(2 * conv_flops(a.grad_out, a.weight));
    try {
        const auto& p = a.params;
        std::array<bool, 3> mask = {a.grad_input.data != nullptr, a.grad_weight.data != nullptr,
                                    a.grad_bias.data != nullptr};
        std::vector<int64_t> bias_sizes;
        if (mask[2]) bias_sizes = {a.grad_bias.sizes[0]};
        const bool widen = leaks_non_finite(a.grad_out, a.input) || has_non_finite_bf16(a.weight);
        auto [gi, gw, gb] = at::convolution_backward(
            compute_operand(host_alias(a.grad_out), widen), compute_operand(host_alias(a.input), widen),
            compute_operand(host_alias(a.weight), widen), bias_sizes, vec(p.stride, p.spatial), vec(p.padding, p.spatial),
            vec(p.dilation, p.spatial), p.transposed, vec(p.output_padding, p.spatial), p.groups, mask);
        if (mask[0]) host_alias(a.grad_input).copy_(gi);
        if (mask[1]) host_alias(a.grad_weight).copy_(gw);
        if (mask[2]) host_alias(a.grad_bias).copy_(gb);
    } catch (const std::exception& e) {
        return internal_error(std::string("conv backward: ") + e.what());
    }
    return Status();
}

// LAPACK through 32-bit sizes; one call per matrix, single-threaded like the GEMMs (core splits
// batches over the pool), except one large matrix, which gets a team.
std::optional<Status> lapack_sizes(std::initializer_list<int64_t> sizes) {
    for (int64_t s : sizes) {
        if (s > std::numeric_limits<int>::max()) return unimplemented("lapack: a dimension above 2^31 - 1");
    }
    return std::nullopt;
}

void lapack_team(int64_t n) { set_team(n < 512 ? 1 : static_cast<int>(std::thread::hardware_concurrency())); }

Status argument_error(const char* routine, int info) {
    return internal_error(std::string(routine) + ": argument " + std::to_string(-info) + " is invalid");
}

Status lapack_potrf(kernels::DType t, bool upper, int64_t n, void* a, int64_t lda, int32_t* info) {
    if (auto e = lapack_sizes({n, lda})) return *e;
    lapack_team(n);
    const char uplo = upper ? 'U' : 'L';
    const int n32 = static_cast<int>(n), lda32 = static_cast<int>(lda);
    if (t == kernels::DType::kFloat32) spotrf_(&uplo, &n32, static_cast<float*>(a), &lda32, info);
    else dpotrf_(&uplo, &n32, static_cast<double*>(a), &lda32, info);
    return *info < 0 ? argument_error("potrf", *info) : Status();
}

Status lapack_potrs(kernels::DType t, bool upper, int64_t n, int64_t nrhs, const void* a, int64_t lda, void* b,
                    int64_t ldb) {
    if (auto e = lapack_sizes({n, nrhs, lda, ldb})) return *e;
    lapack_team(n);
    const char uplo = upper ? 'U' : 'L';
    const int n32 = static_cast<int>(n), k32 = static_cast<int>(nrhs), lda32 = static_cast<int>(lda),
              ldb32 = static_cast<int>(ldb);
    int info = 0;
    if (t == kernels::DType::kFloat32)
        spotrs_(&uplo, &n32, &k32, static_cast<const float*>(a), &lda32, static_cast<float*>(b), &ldb32, &info);
    else dpotrs_(&uplo, &n32, &k32, static_cast<const double*>(a), &lda32, static_cast<double*>(b), &ldb32, &info);
    return info < 0 ? argument_error("potrs", info) : Status();
}

Status lapack_getrf(kernels::DType t, int64_t m, int64_t n, void* a, int64_t lda, int32_t* pivots, int32_t* info) {
    if (auto e = lapack_sizes({m, n, lda})) return *e;
    lapack_team(std::max(m, n));
    const int m32 = static_cast<int>(m), n32 = static_cast<int>(n), lda32 = static_cast<int>(lda);
    if (t == kernels::DType::kFloat32) sgetrf_(&m32, &n32, static_cast<float*>(a), &lda32, pivots, info);
    else dgetrf_(&m32, &n32, static_cast<double*>(a), &lda32, pivots, info);
    return *info < 0 ? argument_error("getrf", *info) : Status();
}

Status lapack_getrs(kernels::DType t, bool transpose, int64_t n, int64_t nrhs, const void* a, int64_t lda,
                    const int32_t* pivots, void* b, int64_t ldb) {
    if (auto e = lapack_sizes({n, nrhs, lda, ldb})) return *e;
    lapack_team(n);
    const char trans = transpose ? 'T' : 'N';
    const int n32 = static_cast<int>(n), k32 = static_cast<int>(nrhs), lda32 = static_cast<int>(lda),
              ldb32 = static_cast<int>(ldb);
    int info = 0;
    if (t == kernels::DType::kFloat32)
        sgetrs_(&trans, &n32, &k32, static_cast<const float*>(a), &lda32, pivots, static_cast<float*>(b), &ldb32, &info);
    else
        dgetrs_(&trans, &n32, &k32, static_cast<const double*>(a), &lda32, pivots, static_cast<double*>(b), &ldb32,
                &info);
    return info < 0 ? argument_error("getrs", info) : Status();
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: BLAS sees each row-major
// array as the transpose of itself, so B comes first and each transposition flag carries over.
void blas_block_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                      const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
    set_team(1);
    const int m32 = static_cast<int>(m), n32 = static_cast<int>(n), k32 = static_cast<int>(k);
    const int lda32 = static_cast<int>(lda), ldb32 = static_cast<int>(ldb), ldc32 = static_cast<int>(ldc);
    const float one = 1.f, beta = accumulate ? 1.f : 0.f;
    const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
    sgemm_(&tb, &ta, &n32, &m32, &k32, &one, b, &ldb32, a, &lda32, &beta, c, &ldc32);
}

struct Registrar {
    Registrar() {
        kernels::set_gemm_provider(&libtorch_gemm, "libtorch (MKL / oneDNN)");
        kernels::set_conv_provider(&libtorch_conv, &libtorch_conv_backward, "libtorch (oneDNN)");
        kernels::set_block_sgemm(&blas_block_sgemm);
        kernels::LapackProvider lapack;
        lapack.potrf = &lapack_potrf;
        lapack.potrs = &lapack_potrs;
        lapack.getrf = &lapack_getrf;
        lapack.getrs = &lapack_getrs;
        kernels::set_lapack_provider(lapack, "libtorch (MKL LAPACK)");
    }
} g_registrar;

}  // namespace
}  // namespace ember::torch_glue
