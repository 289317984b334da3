// Matrix products: mm, bmm, addmm, baddbmm and their out= and in-place forms, which is what
// matmul, linear and their backwards reach. Each queues one kernels::gemm on the stream.
// Dtypes the GEMM does not take (bool, complex) go to the CPU fallback like any missing kernel.
#include <ATen/native/Resize.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/addr.h>
#include <ATen/ops/addr_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ops/linalg_solve_triangular_ops.h>
#include <ATen/ops/mm_ops.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "complex_parts.h"
#include "glue.h"
#include "kernels/gemm/gemm.h"
#include "kernels/linalg/distance.h"
#include "kernels/linalg/triangular.h"

namespace ember::torch_glue {
namespace {

// Floating types go to the GEMM provider, integers to core's own integer loop; bool (which the
// CPU refuses) and complex take the fallback.
bool gemm_dtype(c10::ScalarType t) {
    return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf ||
           (c10::isIntegralType(t, /*includeBool=*/false) && t != at::kUInt16 && t != at::kUInt32 &&
            t != at::kUInt64);
}

// addmm/baddbmm: an integer product with a floating alpha or beta keeps the CPU's own rule.
bool product_native(const at::Tensor& a, const c10::Scalar& beta, const c10::Scalar& alpha) {
    if (!gemm_dtype(a.scalar_type())) return false;
    return a.is_floating_point() || (!beta.isFloatingPoint() && !alpha.isFloatingPoint() && !beta.isComplex() &&
                                     !alpha.isComplex());
}

kernels::TensorView as_3d(const at::Tensor& t, bool writable = true) {
    at::Tensor v = t.dim() == 2 ? t.unsqueeze(0) : t;
    return writable ? view_of(v) : view_in(v);
}

void check_operands(const char* op, const at::Tensor& a, const at::Tensor& b, int64_t dim) {
    TORCH_CHECK(a.dim() == dim, op, ": self must be a ", dim, "D tensor");
    TORCH_CHECK(b.dim() == dim, op, ": mat2 must be a ", dim, "D tensor");
    TORCH_CHECK(a.scalar_type() == b.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ",
                a.scalar_type(), " != ", b.scalar_type());
    TORCH_CHECK(a.device() == b.device(), "Expected all tensors to be on the same device, but found at "
                "least two devices, ", a.device(), " and ", b.device(), "!");
    if (dim == 2) {
        TORCH_CHECK(a.size(1) == b.size(0), "mat1 and mat2 shapes cannot be multiplied (", a.size(0),
                    "x", a.size(1), " and ", b.size(0), "x", b.size(1), ")");
    } else {
        TORCH_CHECK(a.size(0) == b.size(0), "batch1 and batch2 must have same number of batches, got ",
                    a.size(0), " and ", b.size(0));
        TORCH_CHECK(a.size(2) == b.size(1), "Expected size for first two dimensions of batch2 tensor to be: [",
                    a.size(0), ", ", a.size(2), "] but got: [", b.size(0), ", ", b.size(1), "].");
    }
}

// out = beta * out + alpha * a @ b, with out already holding the addend when beta != 0. Integer
// products take alpha and beta exactly (int64), floating ones as doubles.
void queue_gemm(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                const c10::Scalar& alpha) {
    if (out.numel() == 0) return;
    c10::DeviceGuard guard(out.device());
    const bool zero_beta = beta.isFloatingPoint() ? beta.toDouble() == 0 : beta.toLong() == 0;
    if (a.size(-1) == 0) {  // empty inner dimension: the product is zero
        if (zero_beta) out.zero_();
        else out.mul_(beta);
        return;
    }
    kernels::GemmArgs args{as_3d(a, false), as_3d(b, false), as_3d(out), alpha.toDouble(), zero_beta ? 0.0 : beta.toDouble()};
    if (!out.is_floating_point()) {
        args.int_alpha = alpha.toLong();
        args.int_beta = zero_beta ? 0 : beta.toLong();
    }
    queue(out, "gemm", [args](runtime::ThreadPool* pool) { return kernels::gemm(args, pool); });
}

// out= must hold the operands' dtype, as on CPU (which says so before looking at sizes).
void check_out_dtype(const at::Tensor& out, const at::Tensor& like) {
    TORCH_CHECK(out.scalar_type() == like.scalar_type(), "Expected out tensor to have dtype ", like.scalar_type(),
                ", but got ", out.scalar_type(), " instead");
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
    if (self.is_complex() && out.scalar_type() == self.scalar_type() && out.is_privateuseone())
        if (auto r = complex_matmul(self, mat2)) return write_out(out, *r);
    if (!gemm_dtype(self.scalar_type())) return cpu<ATEN_OP2(mm, out)>(self, mat2, out);
    check_operands("mm", self, mat2, 2);
    check_out_dtype(out, self);
    resize_out(out, {self.size(0), mat2.size(1)});
    queue_gemm(out, self, mat2, 0, 1);
    return out;
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
    if (auto r = complex_matmul(self, mat2)) return *r;
    if (!gemm_dtype(self.scalar_type())) return cpu<ATEN_OP(mm)>(self, mat2);
    at::Tensor out = at::empty({0}, self.options());
    return mm_out(self, mat2, out);
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
    if (self.is_complex() && out.scalar_type() == self.scalar_type() && out.is_privateuseone())
        if (auto r = complex_matmul(self, mat2)) return write_out(out, *r);
    if (!gemm_dtype(self.scalar_type())) return cpu<ATEN_OP2(bmm, out)>(self, mat2, out);
    check_operands("bmm", self, mat2, 3);
    check_out_dtype(out, self);
    resize_out(out, {self.size(0), self.size(1), mat2.size(2)});
    queue_gemm(out, self, mat2, 0, 1);
    return out;
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
    if (auto r = complex_matmul(self, mat2)) return *r;
    if (!gemm_dtype(self.scalar_type())) return cpu<ATEN_OP(bmm)>(self, mat2);
    at::Tensor out = at::empty({0}, self.options());
    return bmm_out(self, mat2, out);
}

// addmm/baddbmm: out = beta * input + alpha * (a @ b), input broadcast to the product's shape.
// As in PyTorch, beta == 0 ignores input entirely (NaN in it does not propagate).
at::Tensor& add_product_out(const at::Tensor& input, const at::Tensor& a, const at::Tensor& b,
                            const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out,
                            int64_t dim) {
    check_operands(dim == 2 ? "addmm" : "baddbmm", a, b, dim);
    std::vector<int64_t> shape = dim == 2 ? std::vector<int64_t>{a.size(0), b.size(1)}
                                          : std::vector<int64_t>{a.size(0), a.size(1), b.size(2)};
    if (dim == 2) {
        TORCH_CHECK(input.scalar_type() == a.scalar_type(), "self and mat2 must have the same dtype, but got ",
                    input.scalar_type(), " and ", a.scalar_type());
    } else {  // baddbmm's own wording, dtypes as type names
        TORCH_CHECK(input.scalar_type() == a.scalar_type() && a.scalar_type() == b.scalar_type(),
                    "Input dtypes must be the same, got: input ", input.dtype(), ", batch1: ", a.dtype(),
                    ", batch2: ", b.dtype());
    }
    check_out_dtype(out, a);
    if (!a.is_floating_point()) {  // the CPU's checked conversion to the operands' dtype
        check_scalar_fits(alpha, a.scalar_type());
        check_scalar_fits(beta, a.scalar_type());
    }
    const bool zero_beta = beta.isFloatingPoint() ? beta.toDouble() == 0 : beta.toLong() == 0;
    if (!out.is_same(input)) {
        resize_out(out, shape);
        if (!zero_beta) out.copy_(input.expand(shape));
    } else {
        TORCH_CHECK(out.sizes() == c10::IntArrayRef(shape), "the in-place form needs self of shape ", shape);
    }
    queue_gemm(out, a, b, beta, alpha);
    return out;
}

// beta * input + alpha * (a @ b) for complex operands (a complex nn.Linear with a bias), from the
// complex product and sums; complex scalars take the CPU path.
std::optional<at::Tensor> complex_add_product(const at::Tensor& input, const at::Tensor& a, const at::Tensor& b,
                                              const c10::Scalar& beta, const c10::Scalar& alpha) {
    if (beta.isComplex() || alpha.isComplex() || !complex_on_device(input) || input.scalar_type() != a.scalar_type())
        return std::nullopt;
    auto product = complex_matmul(a, b);
    if (!product) return std::nullopt;
    const double bv = beta.toDouble(), av = alpha.toDouble();
    at::Tensor scaled = av == 1.0 ? *product : *complex_add(at::zeros_like(*product), *product, alpha, false);
    if (bv == 0.0) return scaled;  // input ignored, NaN included, as in PyTorch
    return complex_add(scaled, input.expand(scaled.sizes()), beta, false);
}

at::Tensor addmm(const at::Tensor& input, const at::Tensor& a, const at::Tensor& b,
                 const c10::Scalar& beta, const c10::Scalar& alpha) {
    if (auto r = complex_add_product(input, a, b, beta, alpha)) return *r;
    if (!product_native(a, beta, alpha)) return cpu<ATEN_OP(addmm)>(input, a, b, beta, alpha);
    at::Tensor out = at::empty({0}, a.options());
    return add_product_out(input, a, b, beta, alpha, out, 2);
}

at::Tensor& addmm_out(const at::Tensor& input, const at::Tensor& a, const at::Tensor& b,
                      const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
    if (!product_native(a, beta, alpha)) return cpu<ATEN_OP2(addmm, out)>(input, a, b, beta, alpha, out);
    return add_product_out(input, a, b, beta, alpha, out, 2);
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                   const c10::Scalar& beta, const c10::Scalar& alpha) {
    if (!product_native(a, beta, alpha)) return cpu<ATEN_OP(addmm_)>(self, a, b, beta, alpha);
    return add_product_out(self, a, b, beta, alpha, self, 2);
}

at::Tensor baddbmm(const at::Tensor& input, const at::Tensor& a, const at::Tensor& b,
                   const c10::Scalar& beta, const c10::Scalar& alpha) {
    if (auto r = complex_add_product(input, a, b, beta, alpha)) return *r;
    if (!product_native(a, beta, alpha)) return cpu<ATEN_OP(baddbmm)>(input, a, b, beta, alpha);
    at::Tensor out = at::empty({0}, a.options());
    return add_product_out(input, a, b, beta, alpha, out, 3);
}

at::Tensor& baddbmm_out(const at::Tensor& input, const at::Tensor& a, const at::Tensor& b,
                        const c10::Scalar& beta, const c10::Scalar& alpha, at::Tensor& out) {
    if (!product_native(a, beta, alpha)) return cpu<ATEN_OP2(baddbmm, out)>(input, a, b, beta, alpha, out);
    return add_product_out(input, a, b, beta, alpha, out, 3);
}

at::Tensor& baddbmm_(at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                     const c10::Scalar& beta, const c10::Scalar& alpha) {
    if (!product_native(a, beta, alpha)) return cpu<ATEN_OP(baddbmm_)>(self, a, b, beta, alpha);
    return add_product_out(self, a, b, beta, alpha, self, 3);
}

// addr: the checks on beta and alpha that CPU and CUDA make (the composite kernel other devices
// get has none: an integer addr with beta=2.5 was computed and truncated), then that composite.
void check_addr_scalar(at::ScalarType dtype, const c10::Scalar& s, const char* name) {
    TORCH_CHECK(!s.isBoolean() || dtype == at::kBool, "Boolean ", name, " only supported for Boolean results.");
    TORCH_CHECK(at::isFloatingType(dtype) || at::isComplexType(dtype) || s.isIntegral(true),
                "For integral input tensors, argument ", name, " must not be a floating point number.");
}

at::Tensor addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const c10::Scalar& beta,
                const c10::Scalar& alpha) {
    const at::ScalarType dtype =
        c10::promoteTypes(c10::promoteTypes(self.scalar_type(), vec1.scalar_type()), vec2.scalar_type());
    check_addr_scalar(dtype, beta, "beta");
    check_addr_scalar(dtype, alpha, "alpha");
    return at::compositeexplicitautograd::addr(self, vec1, vec2, beta, alpha);
}

// addr's out= form: PyTorch's composite for other devices copies into any out=, a CPU one
// included; CUDA refuses that, and so does ember (resize_out checks the device first).
at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const c10::Scalar& beta,
                     const c10::Scalar& alpha, at::Tensor& out) {
    at::Tensor r = at::addr(self, vec1, vec2, beta, alpha);
    TORCH_CHECK(at::canCast(r.scalar_type(), out.scalar_type()), "result type ", r.scalar_type(),
                " can't be cast to the desired output type ", out.scalar_type());
    resize_out(out, r.sizes());
    return out.copy_(r);
}

// ---- triangular solve ---------------------------------------------------------------------------

// torch.linalg.solve_triangular: A X = B (left) or X A = B (right, solved as A^T X^T = B^T), with
// batch dims broadcast. float32/float64 on ember; anything else takes the CPU path.
at::Tensor& solve_triangular_out(const at::Tensor& A, const at::Tensor& B, bool upper, bool left, bool unitriangular,
                                 at::Tensor& out) {
    // A lazily negated operand (torch._neg_view, a conjugate's imaginary part) is materialized:
    // the kernel reads stored values.
    if ((A.is_neg() || B.is_neg()) && !out.is_neg() && A.is_privateuseone() && B.is_privateuseone())
        return solve_triangular_out(A.resolve_neg(), B.resolve_neg(), upper, left, unitriangular, out);
    const auto t = A.scalar_type();
    bool ok = (t == at::kFloat || t == at::kDouble) && B.scalar_type() == t && out.scalar_type() == t &&
              A.dim() >= 2 && B.dim() >= 2 && on_device(A.device(), B) && A.is_privateuseone() &&
              A.size(-1) == A.size(-2) && out.is_privateuseone() && !A.is_conj() && !B.is_conj() &&
              !A.is_neg() && !B.is_neg() && !out.is_neg();
    if (ok) ok = left ? B.size(-2) == A.size(-1) : B.size(-1) == A.size(-1);
    if (!ok) return cpu<ATEN_OP2(linalg_solve_triangular, out)>(A, B, upper, left, unitriangular, out);
    const int64_t n = A.size(-1);
    auto batch = at::infer_size(A.sizes().slice(0, A.dim() - 2), B.sizes().slice(0, B.dim() - 2));
    std::vector<int64_t> out_shape(batch.begin(), batch.end());
    out_shape.push_back(B.size(-2));
    out_shape.push_back(B.size(-1));
    // out may be B itself, as on the CPU: B is read before out is resized or written.
    at::Tensor B_in = out.is_alias_of(B) ? B.clone() : B;
    resize_out(out, out_shape, {&A});
    if (out.numel() == 0) return out;
    int64_t bp = c10::multiply_integers(batch);
    std::vector<int64_t> a_shape(batch.begin(), batch.end());
    a_shape.push_back(n);
    a_shape.push_back(n);
    // A batch of one broadcasts without a copy per system.
    at::Tensor a = c10::multiply_integers(A.sizes().slice(0, A.dim() - 2)) == 1
                       ? A.reshape({1, n, n}).contiguous()
                       : A.expand(a_shape).contiguous().view({bp, n, n});
    at::Tensor b = B_in.expand(out_shape).reshape({bp, B_in.size(-2), B_in.size(-1)});
    if (!left) b = b.transpose(1, 2);  // X A = B  <=>  A^T X^T = B^T
    at::Tensor x = b.contiguous().clone(at::MemoryFormat::Contiguous);
    kernels::TensorView xv = view_of(x), av = view_of(a);
    queue(x, "linalg_solve_triangular", [xv, av, upper, unitriangular, left](runtime::ThreadPool* p) {
        return kernels::solve_triangular(xv, av, xv, upper, unitriangular, !left, p);
    });
    at::Tensor result = left ? x.view(out_shape) : x.transpose(1, 2).reshape(out_shape);
    out.copy_(result);
    return out;
}

at::Tensor solve_triangular(const at::Tensor& A, const at::Tensor& B, bool upper, bool left, bool unitriangular) {
    at::Tensor out = at::empty({0}, B.options().dtype(at::result_type(A, B)));
    return solve_triangular_out(A, B, upper, left, unitriangular, out);
}

// ---- pairwise distances (torch.pdist) -----------------------------------------------------------
// float32/float64 contiguous 2-d inputs on ember; anything else (and the CPU's errors) takes the
// CPU path. The autograd formula of _pdist_forward calls _pdist_backward.

bool pdist_native(const at::Tensor& self, double p) {
    const auto t = self.scalar_type();
    return (t == at::kFloat || t == at::kDouble) && self.dim() == 2 && self.is_contiguous() && p >= 0 &&
           self.is_privateuseone();
}

at::Tensor pdist_forward(const at::Tensor& self, double p) {
    if (!pdist_native(self, p)) return cpu<ATEN_OP(_pdist_forward)>(self, p);
    const int64_t n = self.size(0);
    at::Tensor out = at::empty({n * (n - 1) / 2}, self.options());
    if (out.numel() == 0) return out;
    if (self.size(1) == 0) return out.zero_();
    kernels::TensorView ov = view_of(out), xv = view_in(self);
    queue(out, "pdist", [ov, xv, p](runtime::ThreadPool* pool) { return kernels::pdist_forward(ov, xv, p, pool); });
    return out;
}

at::Tensor pdist_backward(const at::Tensor& grad, const at::Tensor& self, double p, const at::Tensor& pdist) {
    if (!pdist_native(self, p) || !on_device(self.device(), grad) || !on_device(self.device(), pdist) ||
        grad.scalar_type() != self.scalar_type() || pdist.scalar_type() != self.scalar_type())
        return cpu<ATEN_OP(_pdist_backward)>(grad, self, p, pdist);
    at::Tensor gx = at::empty_like(self, at::MemoryFormat::Contiguous);
    if (gx.numel() == 0) return gx;
    if (self.size(0) <= 1) return gx.zero_();
    at::Tensor g = grad.contiguous(), d = pdist.contiguous();
    kernels::TensorView gxv = view_of(gx), gv = view_in(g), xv = view_in(self), dv = view_in(d);
    queue(gx, "pdist_backward", [gxv, gv, xv, dv, p](runtime::ThreadPool* pool) {
        return kernels::pdist_backward(gxv, gv, xv, p, dv, pool);
    });
    return gx;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_pdist_forward", pdist_forward);
    m.impl("_pdist_backward", pdist_backward);
    m.impl("linalg_solve_triangular", solve_triangular);
    m.impl("linalg_solve_triangular.out", solve_triangular_out);
    m.impl("mm", mm);
    m.impl("addr", addr);
    m.impl("addr.out", addr_out);
    m.impl("mm.out", mm_out);
    m.impl("bmm", bmm);
    m.impl("bmm.out", bmm_out);
    m.impl("addmm", addmm);
    m.impl("addmm.out", addmm_out);
    m.impl("addmm_", addmm_);
    m.impl("baddbmm", baddbmm);
    m.impl("baddbmm.out", baddbmm_out);
    m.impl("baddbmm_", baddbmm_);
}

}  // namespace ember::torch_glue
