// The GEMM provider behind core's kernels::gemm: the BLAS inside libtorch (MKL for float32,
// oneDNN with AMX/AVX-512 for bfloat16 and float16 where the CPU has them), reached through
// CPU tensor aliases of device memory. Chosen by measurement against torch.mm (see
// bench/matmul.py and docs/architecture.md); core only sees the narrow GemmArgs interface.
#include <ATen/ATen.h>

#include "context.h"
#include "kernels/gemm/gemm.h"

namespace ember::torch_glue {
namespace {

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

Status libtorch_gemm(const kernels::GemmArgs& g) {
    try {
        at::Tensor a = host_alias(g.a), b = host_alias(g.b), c = host_alias(g.c);
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

struct Registrar {
    Registrar() { kernels::set_gemm_provider(&libtorch_gemm, "libtorch (MKL / oneDNN)"); }
} g_registrar;

}  // namespace
}  // namespace ember::torch_glue
