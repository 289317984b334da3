// Three-input elementwise ops: where, addcmul, addcdiv, lerp (what optimizers and masking use),
// on core's engine. Mixed dtypes PyTorch refuses, integers for the float-only ops, and complex
// take the CPU fallback, so errors and results stay PyTorch's.
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/ScalarOps.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "../fallback.h"
#include "complex_parts.h"
#include "elementwise_iter.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

using kernels::TernaryOp;

at::TensorIterator promoting_iter(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                                  const at::Tensor& c) {
    return at::TensorIteratorConfig()
        .allow_cpu_scalars(true)
        .promote_inputs_to_common_dtype(true)
        .cast_common_dtype_to_outputs(true)
        .enforce_safe_casting_to_output(true)
        .add_output(out)
        .add_const_input(a)
        .add_const_input(b)
        .add_const_input(c)
        .build();
}

// ---- where ----------------------------------------------------------------------------------

// where(cond, a, b) with a complex result, part by part.
std::optional<at::Tensor> where_complex(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
    const c10::ScalarType rt = at::result_type(self, other);
    if (!at::isComplexType(rt) || cond.scalar_type() != at::kBool || !cond.is_privateuseone()) return std::nullopt;
    // Operands elsewhere than the condition's device take the usual path and its device error;
    // 0-d CPU tensors (Python numbers) are moved.
    for (const at::Tensor* t : {&self, &other})
        if (t->device() != cond.device() && !(t->is_cpu() && t->dim() == 0)) return std::nullopt;
    const at::Tensor a = self.to(cond.device(), rt), b = other.to(cond.device(), rt);
    if (!complex_on_device(a)) return std::nullopt;
    auto [a0, a1] = re_im(a);
    auto [b0, b1] = re_im(b);
    return from_parts(at::where(cond, a0, b0), at::where(cond, a1, b1));
}

at::Tensor& where_out(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
    if (out.is_privateuseone())
        if (auto r = where_complex(cond, self, other); r && r->scalar_type() == out.scalar_type()) return write_out(out, *r);
    c10::ScalarType rt = at::result_type(self, other);
    bool native = cond.scalar_type() == at::kBool && !at::isComplexType(rt) && has_dtype(rt) && out.scalar_type() == rt;
    if (!native) return cpu<ATEN_OP2(where, self_out)>(cond, self, other, out);
    at::TensorIterator iter = at::TensorIteratorConfig()
                                  .check_all_same_dtype(false)
                                  .allow_cpu_scalars(true)
                                  .add_output(out)
                                  .add_const_input(cond)
                                  .add_const_input(self)
                                  .add_const_input(other)
                                  .build();
    if (iter.ndim() > kernels::kMaxLoopDims) return cpu<ATEN_OP2(where, self_out)>(cond, self, other, out);
    queue_ternary(TernaryOp::kWhere, iter, 0, rt);
    return out;
}

at::Tensor where_self(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
    if (auto r = where_complex(cond, self, other)) return *r;
    c10::ScalarType rt = at::result_type(self, other);
    if (cond.scalar_type() != at::kBool || at::isComplexType(rt) || !has_dtype(rt)) {  // float8: the CPU's
        return cpu<ATEN_OP2(where, self)>(cond, self, other);
    }
    for (const at::Tensor* t : {&self, &other})  // torch.where(c, x, 300) with x uint8 raises, as on the CPU
        if (t->unsafeGetTensorImpl()->is_wrapped_number()) check_scalar_fits(t->item(), rt);
    // The ember operand decides the device; the others may be 0-dim CPU scalars. Empty, the
    // output is sized by the iterator, laid out like the inputs (channels_last stays).
    c10::Device device = !cond.device().is_cpu() ? cond.device()
                         : !self.device().is_cpu() ? self.device() : other.device();
    at::Tensor out = at::empty({0}, self.options().dtype(rt).device(device));
    return where_out(cond, self, other, out);
}

// ---- addcmul / addcdiv ------------------------------------------------------------------------

#define EMBER_ADDC(name, kOp, integers)                                                               \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,         \
                           const c10::Scalar& value, at::Tensor& out) {                                \
        auto iter = promoting_iter(out, self, t1, t2);                                                 \
        if (!native_compute(iter, integers)) return cpu<ATEN_OP2(name, out)>(self, t1, t2, value, out); \
        queue_ternary(kOp, iter, value);                                                               \
        return out;                                                                                    \
    }                                                                                                  \
    at::Tensor name##_fn(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,           \
                         const c10::Scalar& value) {                                                   \
        at::Tensor out;                                                                                \
        auto iter = promoting_iter(out, self, t1, t2);                                                 \
        if (!native_compute(iter, integers)) return cpu<ATEN_OP(name)>(self, t1, t2, value);          \
        queue_ternary(kOp, iter, value);                                                               \
        return iter.output();                                                                          \
    }                                                                                                  \
    at::Tensor& name##__fn(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,               \
                           const c10::Scalar& value) {                                                 \
        auto iter = promoting_iter(self, self, t1, t2);                                                \
        if (!native_compute(iter, integers)) return cpu<ATEN_OP(name##_)>(self, t1, t2, value);       \
        queue_ternary(kOp, iter, value);                                                               \
        return self;                                                                                   \
    }

EMBER_ADDC(addcmul, TernaryOp::kAddcmul, true)
EMBER_ADDC(addcdiv, TernaryOp::kAddcdiv, false)
#undef EMBER_ADDC

// ---- lerp: no type promotion; end and weight must have self's dtype ---------------------------

bool lerp_native(const at::Tensor& self, const at::Tensor& end, const at::Tensor* weight) {
    if (!at::isFloatingType(self.scalar_type()) || end.scalar_type() != self.scalar_type()) return false;
    return weight == nullptr || weight->scalar_type() == self.scalar_type();
}

at::Tensor& lerp_scalar_out(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight, at::Tensor& out) {
    if (!lerp_native(self, end, nullptr) || weight.isComplex()) {
        return cpu<ATEN_OP2(lerp, Scalar_out)>(self, end, weight, out);
    }
    at::Tensor w = c10::scalar_to_tensor(weight);
    w.unsafeGetTensorImpl()->set_wrapped_number(true);
    auto iter = promoting_iter(out, self, end, w);
    if (iter.ndim() > kernels::kMaxLoopDims) return cpu<ATEN_OP2(lerp, Scalar_out)>(self, end, weight, out);
    queue_ternary(TernaryOp::kLerp, iter, 0);
    return out;
}

at::Tensor lerp_scalar(const at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight) {
    if (!lerp_native(self, end, nullptr)) return cpu<ATEN_OP2(lerp, Scalar)>(self, end, weight);
    at::Tensor out = at::empty({0}, self.options());
    return lerp_scalar_out(self, end, weight, out);
}

// In place, what ember does not compute goes to the CPU's in-place op, which refuses an end or
// weight that broadcasts self to a larger shape (its out= form would resize self instead).
at::Tensor& lerp__scalar(at::Tensor& self, const at::Tensor& end, const c10::Scalar& weight) {
    if (!lerp_native(self, end, nullptr) || weight.isComplex()) return cpu<ATEN_OP2(lerp_, Scalar)>(self, end, weight);
    return lerp_scalar_out(self, end, weight, self);
}

at::Tensor& lerp_tensor_out(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight, at::Tensor& out) {
    if (!lerp_native(self, end, &weight)) return cpu<ATEN_OP2(lerp, Tensor_out)>(self, end, weight, out);
    auto iter = promoting_iter(out, self, end, weight);
    if (iter.ndim() > kernels::kMaxLoopDims) return cpu<ATEN_OP2(lerp, Tensor_out)>(self, end, weight, out);
    queue_ternary(TernaryOp::kLerp, iter, 0);
    return out;
}

at::Tensor lerp_tensor(const at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
    if (!lerp_native(self, end, &weight)) return cpu<ATEN_OP2(lerp, Tensor)>(self, end, weight);
    at::Tensor out;
    auto iter = promoting_iter(out, self, end, weight);
    if (iter.ndim() > kernels::kMaxLoopDims) return cpu<ATEN_OP2(lerp, Tensor)>(self, end, weight);
    queue_ternary(TernaryOp::kLerp, iter, 0);
    return iter.output();
}

at::Tensor& lerp__tensor(at::Tensor& self, const at::Tensor& end, const at::Tensor& weight) {
    if (!lerp_native(self, end, &weight)) return cpu<ATEN_OP2(lerp_, Tensor)>(self, end, weight);
    return lerp_tensor_out(self, end, weight, self);
}

// ---- masked_fill_: self = where(mask, value, self), value first converted to self's dtype ----

// masked_fill_ on a self with broadcast (stride-0) dims writes each memory element once per view
// element that shares it, always with the same value: the CPU allows that (with a deprecation
// warning), and the result is the element's fill wherever any of its view elements is masked.
// So the fill runs on the view with those dims collapsed, under the mask reduced over them by any().
// Returns false where self has no such dims.
template <class Fill>
bool fill_through_broadcast(at::Tensor& self, const at::Tensor& mask, Fill fill) {
    if (at::has_internal_overlap(self) != at::MemOverlap::Yes || mask.device() != self.device() ||
        mask.scalar_type() != at::kBool || at::infer_size(self.sizes(), mask.sizes()) != self.sizes())
        return false;
    TORCH_WARN("Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
    std::vector<int64_t> sizes = self.sizes().vec(), shared;
    for (int64_t d = 0; d < self.dim(); ++d) {
        if (self.stride(d) == 0 && sizes[d] > 1) {
            shared.push_back(d);
            sizes[d] = 1;
        }
    }
    at::Tensor base = self.as_strided(sizes, self.strides(), self.storage_offset());
    fill(base, mask.expand(self.sizes()).any(shared, /*keepdim=*/true));
    return true;
}

at::Tensor& masked_fill_scalar(at::Tensor& self, const at::Tensor& mask, const c10::Scalar& value) {
    if (fill_through_broadcast(self, mask, [&](at::Tensor& base, const at::Tensor& m) { base.masked_fill_(m, value); }))
        return self;
    if (complex_on_device(self) && !self.is_conj() && mask.scalar_type() == at::kBool && mask.device() == self.device() &&
        at::infer_size(self.sizes(), mask.sizes()) == self.sizes()) {  // (a larger mask: the CPU's error)
        const c10::complex<double> v = value.toComplexDouble();
        auto [re, im] = re_im(self);
        return write_out(self, from_parts(at::where(mask, at::scalar_tensor(v.real(), re.options()), re),
                                          at::where(mask, at::scalar_tensor(v.imag(), im.options()), im)));
    }
    bool ok = mask.scalar_type() == at::kBool && mask.device() == self.device() && !self.is_complex() &&
              !value.isComplex() && (at::isFloatingType(self.scalar_type()) || !value.isFloatingPoint());
    if (!ok) return cpu<ATEN_OP2(masked_fill_, Scalar)>(self, mask, value);
    check_scalar_fits(value, self.scalar_type());
    at::Tensor v = c10::scalar_to_tensor(value).to(self.scalar_type());
    v.unsafeGetTensorImpl()->set_wrapped_number(true);
    return where_out(mask, v, self, self);
}

at::Tensor& masked_fill_tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
    TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
                value.dim(), " dimension(s).");
    if (value.device().is_cpu()) return masked_fill_scalar(self, mask, value.item());
    if (fill_through_broadcast(self, mask, [&](at::Tensor& base, const at::Tensor& m) { base.masked_fill_(m, value); }))
        return self;
    bool ok = mask.scalar_type() == at::kBool && mask.device() == self.device() && value.device() == self.device() &&
              value.scalar_type() == self.scalar_type() && !self.is_complex();
    if (!ok) return cpu<ATEN_OP2(masked_fill_, Tensor)>(self, mask, value);
    return where_out(mask, value, self, self);
}

// ---- threshold_backward (relu's backward): grad where self > threshold, else 0 --------------

at::Tensor& threshold_backward_out(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& threshold,
                                   at::Tensor& out) {
    at::Tensor zero = c10::scalar_to_tensor(0.0);
    zero.unsafeGetTensorImpl()->set_wrapped_number(true);
    return where_out(self.le(threshold), zero, grad, out);
}

at::Tensor threshold_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& threshold) {
    at::Tensor out = at::empty({0}, grad.options());
    return threshold_backward_out(grad, self, threshold, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("masked_fill_.Scalar", masked_fill_scalar);
    m.impl("masked_fill_.Tensor", masked_fill_tensor);
    m.impl("threshold_backward", threshold_backward);
    m.impl("threshold_backward.grad_input", threshold_backward_out);
    m.impl("where.self", where_self);
    m.impl("where.self_out", where_out);
    m.impl("addcmul", addcmul_fn);
    m.impl("addcmul_", addcmul__fn);
    m.impl("addcmul.out", addcmul_out);
    m.impl("addcdiv", addcdiv_fn);
    m.impl("addcdiv_", addcdiv__fn);
    m.impl("addcdiv.out", addcdiv_out);
    m.impl("lerp.Scalar", lerp_scalar);
    m.impl("lerp_.Scalar", lerp__scalar);
    m.impl("lerp.Scalar_out", lerp_scalar_out);
    m.impl("lerp.Tensor", lerp_tensor);
    m.impl("lerp_.Tensor", lerp__tensor);
    m.impl("lerp.Tensor_out", lerp_tensor_out);
}

}  // namespace ember::torch_glue
