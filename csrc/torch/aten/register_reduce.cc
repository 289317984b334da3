// Reductions on core's kernels::reduce: sum, mean, prod, amax/amin, max/min (with indices),
// argmax/argmin, linalg_vector_norm, any/all, var/std. The glue works out PyTorch's output
// shape and dtype and orders the input's dims (kept first, reduced last) as a view; anything
// unusual (empty inputs, complex, an out= tensor of another dtype) takes the CPU fallback, so
// PyTorch's own checks and messages apply.
#include <ATen/Operators.h>
#include <limits>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../context.h"
#include "../fallback.h"
#include "kernels/reduce/reduce.h"
#include "complex_parts.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

using kernels::ReduceOp;

struct Plan {
    std::vector<int64_t> out_shape;  // as PyTorch reports it (keepdim respected)
    std::vector<int64_t> order;      // kept dims, then reduced dims
    int kept = 0;
};

Plan make_plan(const at::Tensor& self, at::OptionalIntArrayRef dims, bool keepdim) {
    const int64_t nd = self.dim();
    std::bitset<at::dim_bitset_size> reduce_mask;
    if (!dims.has_value() || dims->empty()) {
        reduce_mask.set();
    } else {
        reduce_mask = at::dim_list_to_bitset(*dims, nd);
    }
    Plan p;
    for (int64_t d = 0; d < nd; ++d) {
        if (!reduce_mask[d]) {
            p.order.push_back(d);
            p.out_shape.push_back(self.size(d));
        } else if (keepdim) {
            p.out_shape.push_back(1);
        }
    }
    p.kept = static_cast<int>(p.order.size());
    for (int64_t d = 0; d < nd; ++d)
        if (reduce_mask[d]) p.order.push_back(d);
    return p;
}

// The output with only its kept dims (reduced, size-1 dims dropped when keepdim).
kernels::TensorView kept_view(const at::Tensor& out, const at::Tensor& self, const Plan& p) {
    kernels::TensorView v = view_of(out);
    if (out.dim() == p.kept) return v;
    kernels::TensorView k = v;
    k.ndim = 0;
    std::vector<bool> is_kept(self.dim(), false);
    for (int i = 0; i < p.kept; ++i) is_kept[p.order[i]] = true;
    for (int64_t d = 0; d < self.dim(); ++d) {
        if (!is_kept[d]) continue;
        k.sizes[k.ndim] = v.sizes[d];
        k.strides[k.ndim] = v.strides[d];
        ++k.ndim;
    }
    return k;
}

void queue_reduce(ReduceOp op, const at::Tensor& self, const Plan& p, const at::Tensor& out,
                  const at::Tensor& indices = {}, double ord = 2, double correction = 1) {
    if (out.numel() == 0) return;
    c10::DeviceGuard guard(self.device());
    kernels::ReduceArgs args;
    args.in = view_in(self.dim() == 0 ? self : self.permute(p.order));
    args.kept = p.kept;
    args.out = kept_view(out, self, p);
    if (indices.defined()) args.indices = kept_view(indices, self, p);
    args.p = ord;
    args.correction = correction;
    runtime::Device& dev = tensor_device(self);
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), kernels::op_name(op), [args, op, pool] { return kernels::reduce(op, args, pool); });
}

bool reducible(const at::Tensor& self) {
    return self.numel() > 0 && !self.is_complex();
}

// An empty input whose result is empty too (an empty dim is kept): nothing to compute and no NaN
// or identity to fill in. A reduced dim of size 0 is left to the CPU, where amax and others raise.
bool empty_result(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {
    if (self.numel() != 0 || self.is_complex()) return false;
    Plan p = make_plan(self, dim, keepdim);
    if (c10::multiply_integers(p.out_shape) != 0) return false;
    for (size_t i = static_cast<size_t>(p.kept); i < p.order.size(); ++i)
        if (self.size(p.order[i]) == 0) return false;
    return true;
}

c10::ScalarType sum_dtype(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
    if (dtype) return *dtype;
    return at::isIntegralType(self.scalar_type(), /*includeBool=*/true) ? at::kLong : self.scalar_type();
}

// ---- sum / mean / prod ------------------------------------------------------------------------

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype, at::Tensor& out) {
    if (out.is_privateuseone() && self.numel() > 0)
        if (auto r = complex_reduce(self, dim, keepdim, dtype, false); r && r->scalar_type() == out.scalar_type())
            return write_out(out, *r);
    Plan p = make_plan(self, dim, keepdim);
    const bool empty = self.numel() == 0 && !self.is_complex() && plain_dtype(out.scalar_type());
    if ((!reducible(self) && !empty) || out.scalar_type() != sum_dtype(self, dtype)) {
        return cpu<ATEN_OP2(sum, IntList_out)>(self, dim, keepdim, dtype, out);
    }
    resize_out(out, p.out_shape);
    if (empty) return out.zero_();  // a sum over nothing is 0, as on CPU
    // sum(dtype=) casts the input first, as the CPU does: floats asked to sum as integers are
    // each truncated, not summed and then truncated.
    const bool cast_first = at::isFloatingType(self.scalar_type()) && !at::isFloatingType(out.scalar_type());
    queue_reduce(ReduceOp::kSum, cast_first ? self.to(out.scalar_type()) : self, p, out);
    return out;
}

// prod over one dim or all of them; a product over nothing is 1. Same dtype rule as sum.
at::Tensor& prod_into(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                      std::optional<c10::ScalarType> dtype, at::Tensor& out) {
    Plan p = make_plan(self, dim, keepdim);
    resize_out(out, p.out_shape);
    if (self.numel() == 0) return out.fill_(1);
    // The product is formed in the result's dtype, as on CPU (int32 values multiplied as float64
    // when dtype=float64 is asked for).
    const at::Tensor in = self.scalar_type() == out.scalar_type() ? self : self.to(out.scalar_type());
    queue_reduce(ReduceOp::kProd, in, p, out);
    return out;
}

bool prod_native(const at::Tensor& self, const at::Tensor& out, std::optional<c10::ScalarType> dtype) {
    return !self.is_complex() && plain_dtype(out.scalar_type()) && out.scalar_type() == sum_dtype(self, dtype);
}

at::Tensor& prod_int_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype,
                         at::Tensor& out) {
    if (!prod_native(self, out, dtype)) return cpu<ATEN_OP2(prod, int_out)>(self, dim, keepdim, dtype, out);
    return prod_into(self, at::IntArrayRef{dim}, keepdim, dtype, out);
}

at::Tensor prod_dim(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<c10::ScalarType> dtype) {
    at::Tensor out = at::empty({0}, self.options().dtype(sum_dtype(self, dtype)));
    if (!prod_native(self, out, dtype)) return cpu<ATEN_OP2(prod, dim_int)>(self, dim, keepdim, dtype);
    return prod_into(self, at::IntArrayRef{dim}, keepdim, dtype, out);
}

at::Tensor prod_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
    at::Tensor out = at::empty({0}, self.options().dtype(sum_dtype(self, dtype)));
    if (!prod_native(self, out, dtype)) return cpu<ATEN_OP(prod)>(self, dtype);
    return prod_into(self, std::nullopt, false, dtype, out);
}

at::Tensor sum_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                   std::optional<c10::ScalarType> dtype) {
    if (self.numel() > 0)
        if (auto r = complex_reduce(self, dim, keepdim, dtype, false)) return *r;
    if (self.is_complex()) return cpu<ATEN_OP2(sum, dim_IntList)>(self, dim, keepdim, dtype);
    at::Tensor out = at::empty({0}, self.options().dtype(sum_dtype(self, dtype)));
    return sum_out(self, dim, keepdim, dtype, out);
}

at::Tensor sum_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
    return sum_dim(self, std::nullopt, false, dtype);
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<c10::ScalarType> dtype, at::Tensor& out) {
    if (out.is_privateuseone() && self.numel() > 0)
        if (auto r = complex_reduce(self, dim, keepdim, dtype, true); r && r->scalar_type() == out.scalar_type())
            return write_out(out, *r);
    c10::ScalarType t = dtype.value_or(self.scalar_type());
    if (self.is_complex() || !at::isFloatingType(t) || out.scalar_type() != t) {
        return cpu<ATEN_OP2(mean, out)>(self, dim, keepdim, dtype, out);
    }
    Plan p = make_plan(self, dim, keepdim);
    resize_out(out, p.out_shape);
    if (self.numel() == 0) return out.fill_(std::numeric_limits<double>::quiet_NaN());  // 0 / 0, as on CPU
    queue_reduce(ReduceOp::kMean, self, p, out);
    return out;
}

at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<c10::ScalarType> dtype) {
    c10::ScalarType t = dtype.value_or(self.scalar_type());
    if (self.numel() > 0)
        if (auto r = complex_reduce(self, dim, keepdim, dtype, true)) return *r;
    if (self.is_complex() || !at::isFloatingType(t)) return cpu<ATEN_OP2(mean, dim)>(self, dim, keepdim, dtype);
    at::Tensor out = at::empty({0}, self.options().dtype(t));
    return mean_out(self, dim, keepdim, dtype, out);
}

at::Tensor mean_all(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
    return mean_dim(self, std::nullopt, false, dtype);
}

// ---- amax / amin / max / min / argmax / argmin --------------------------------------------------

#define EMBER_EXTREME(name, kOp)                                                                   \
    at::Tensor& name##_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out) { \
        if ((!reducible(self) && !empty_result(self, dim, keepdim)) || out.scalar_type() != self.scalar_type()) \
            return cpu<ATEN_OP2(name, out)>(self, dim, keepdim, out);                             \
        Plan p = make_plan(self, dim, keepdim);                                                   \
        resize_out(out, p.out_shape);                                              \
        queue_reduce(kOp, self, p, out);                                                          \
        return out;                                                                               \
    }                                                                                             \
    at::Tensor name##_fn(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {             \
        if (!reducible(self) && !empty_result(self, dim, keepdim))                                 \
            return cpu<ATEN_OP(name)>(self, dim, keepdim);                                        \
        at::Tensor out = at::empty({0}, self.options());                                          \
        return name##_out(self, dim, keepdim, out);                                               \
    }

EMBER_EXTREME(amax, ReduceOp::kAmax)
EMBER_EXTREME(amin, ReduceOp::kAmin)
#undef EMBER_EXTREME

#define EMBER_EXTREME_WITH_INDEX(name, kOp)                                              \
    std::tuple<at::Tensor, at::Tensor> name##_dim(const at::Tensor& self, int64_t dim, bool keepdim) { \
        if (!reducible(self))                                                                      \
            return cpu<ATEN_OP2(name, dim)>(self, dim, keepdim);                                   \
        dim = at::maybe_wrap_dim(dim, self.dim());                                                 \
        Plan p = make_plan(self, at::IntArrayRef(dim), keepdim);                                   \
        at::Tensor values = at::empty(p.out_shape, self.options());                                \
        at::Tensor indices = at::empty(p.out_shape, self.options().dtype(at::kLong));              \
        queue_reduce(kOp, self, p, values, indices);                                               \
        return {values, indices};                                                                  \
    }                                                                                              \
    at::Tensor name##_all(const at::Tensor& self) {                                                \
        if (!reducible(self)) return cpu<ATEN_OP(name)>(self);                                     \
        Plan p = make_plan(self, std::nullopt, false);                                             \
        at::Tensor out = at::empty({}, self.options());                                            \
        queue_reduce(kOp == ReduceOp::kMax ? ReduceOp::kAmax : ReduceOp::kAmin, self, p, out);     \
        return out;                                                                                \
    }

EMBER_EXTREME_WITH_INDEX(max, ReduceOp::kMax)
EMBER_EXTREME_WITH_INDEX(min, ReduceOp::kMin)
#undef EMBER_EXTREME_WITH_INDEX

// bool inputs take the CPU path, which refuses them ("does not support bool input").
#define EMBER_ARG_EXTREME(name, kOp)                                                               \
    at::Tensor& name##_out(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, at::Tensor& out) { \
        if (!reducible(self) || self.scalar_type() == at::kBool || out.scalar_type() != at::kLong) \
            return cpu<ATEN_OP2(name, out)>(self, dim, keepdim, out);                             \
        at::Tensor in = dim ? self : self.reshape({-1});                                          \
        int64_t d = dim ? at::maybe_wrap_dim(*dim, self.dim()) : 0;                               \
        Plan p = make_plan(in, at::IntArrayRef(d), dim ? keepdim : false);                         \
        if (!dim && keepdim) p.out_shape.assign(self.dim(), 1);                                    \
        resize_out(out, p.out_shape);                                              \
        queue_reduce(kOp, in, p, dim ? out : out.reshape({}));                                    \
        return out;                                                                               \
    }                                                                                             \
    at::Tensor name##_fn(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {      \
        if (!reducible(self) || self.scalar_type() == at::kBool)                                  \
            return cpu<ATEN_OP(name)>(self, dim, keepdim);                                        \
        at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));                         \
        return name##_out(self, dim, keepdim, out);                                               \
    }

EMBER_ARG_EXTREME(argmax, ReduceOp::kArgmax)
EMBER_ARG_EXTREME(argmin, ReduceOp::kArgmin)
#undef EMBER_ARG_EXTREME

// ---- norms, var/std, any/all ------------------------------------------------------------------

at::Tensor& vector_norm_out(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                            bool keepdim, std::optional<c10::ScalarType> dtype, at::Tensor& out) {
    c10::ScalarType t = dtype.value_or(self.scalar_type());
    const double p_ord = ord.toDouble();
    // An empty input's p-norm (finite p >= 0) is 0; an inf or negative p of nothing is the CPU's error.
    const bool empty_zero = self.numel() == 0 && std::isfinite(p_ord) && p_ord >= 0;
    if ((!reducible(self) && !empty_zero) || self.is_complex() || !at::isFloatingType(self.scalar_type()) ||
        !at::isFloatingType(t) || out.scalar_type() != t) {
        return cpu<ATEN_OP2(linalg_vector_norm, out)>(self, ord, dim, keepdim, dtype, out);
    }
    Plan p = make_plan(self, dim, keepdim);
    if (empty_zero) {
        resize_out(out, p.out_shape);
        return out.zero_();
    }
    resize_out(out, p.out_shape);
    queue_reduce(ReduceOp::kNorm, self, p, out, {}, p_ord);
    return out;
}

at::Tensor vector_norm(const at::Tensor& self, const c10::Scalar& ord, at::OptionalIntArrayRef dim,
                       bool keepdim, std::optional<c10::ScalarType> dtype) {
    if (self.is_complex() || !at::isFloatingType(self.scalar_type())) {
        return cpu<ATEN_OP(linalg_vector_norm)>(self, ord, dim, keepdim, dtype);
    }
    at::Tensor out = at::empty({0}, self.options().dtype(dtype.value_or(self.scalar_type())));
    return vector_norm_out(self, ord, dim, keepdim, dtype, out);
}


// The older torch.norm(p, dim) overloads (norm_except_dim, weight norm's unfused path): the same
// kernel as linalg_vector_norm; p = None means 2.
bool norm_native(const at::Tensor& self) { return reducible(self) && at::isFloatingType(self.scalar_type()); }

at::Tensor norm_dim(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim) {
    if (!norm_native(self)) return cpu<ATEN_OP2(norm, ScalarOpt_dim)>(self, p, dim, keepdim);
    return vector_norm(self, p.value_or(2), dim, keepdim, std::nullopt);
}

at::Tensor norm_dim_dtype(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim,
                          bool keepdim, c10::ScalarType dtype) {
    if (!norm_native(self) || !at::isFloatingType(dtype))
        return cpu<ATEN_OP2(norm, ScalarOpt_dim_dtype)>(self, p, dim, keepdim, dtype);
    return vector_norm(self, p.value_or(2), dim, keepdim, dtype);
}

at::Tensor& norm_out(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out) {
    if (!norm_native(self) || out.scalar_type() != self.scalar_type())
        return cpu<ATEN_OP2(norm, out)>(self, p, dim, keepdim, out);
    return vector_norm_out(self, p.value_or(2), dim, keepdim, std::nullopt, out);
}

at::Tensor& norm_dtype_out(const at::Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim,
                           bool keepdim, c10::ScalarType dtype, at::Tensor& out) {
    if (!norm_native(self) || !at::isFloatingType(dtype) || out.scalar_type() != dtype)
        return cpu<ATEN_OP2(norm, dtype_out)>(self, p, dim, keepdim, dtype, out);
    return vector_norm_out(self, p.value_or(2), dim, keepdim, dtype, out);
}

// The CPU's warning when the correction leaves no degrees of freedom (its result is NaN or inf).
void warn_dof(const char* name, const at::Tensor& self, const at::Tensor& out, double correction) {
    if (out.numel() == 0) return;
    const double factor = static_cast<double>(self.numel()) / static_cast<double>(out.numel());
    if (factor - correction <= 0)
        TORCH_WARN(name, "(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                         "factor (input numel divided by output numel).");
}

// An empty input's variance over a dim of size 0 is NaN, as on the CPU.
#define EMBER_VAR_STD(name, kOp)                                                                   \
    at::Tensor name##_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,               \
                                 const std::optional<c10::Scalar>& correction, bool keepdim) {      \
        if (self.is_complex() || !at::isFloatingType(self.scalar_type()))                          \
            return cpu<ATEN_OP2(name, correction)>(self, dim, correction, keepdim);                \
        Plan p = make_plan(self, dim, keepdim);                                                    \
        const double c = correction ? correction->toDouble() : 1.0;                                \
        at::Tensor out = at::empty(p.out_shape, self.options());                                   \
        warn_dof(#name, self, out, c);                                                             \
        if (self.numel() == 0) return out.fill_(std::numeric_limits<double>::quiet_NaN());         \
        queue_reduce(kOp, self, p, out, {}, 2, c);                                                 \
        return out;                                                                                \
    }

EMBER_VAR_STD(var, ReduceOp::kVar)
EMBER_VAR_STD(std, ReduceOp::kStd)
#undef EMBER_VAR_STD

// var_mean / std_mean: the two reductions above (BatchNorm, GroupNorm and many hand-written norms
// ask for both at once).
#define EMBER_STAT_MEAN(name, stat)                                                                   \
    std::tuple<at::Tensor, at::Tensor> name##_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim, \
                                                        const std::optional<c10::Scalar>& correction, bool keepdim) { \
        if (self.is_complex() || !at::isFloatingType(self.scalar_type()))                          \
            return cpu<ATEN_OP2(name##_mean, correction)>(self, dim, correction, keepdim);             \
        return {stat##_correction(self, dim, correction, keepdim), at::mean(self, dim, keepdim)};     \
    }

EMBER_STAT_MEAN(var, var)
EMBER_STAT_MEAN(std, std)
#undef EMBER_STAT_MEAN

c10::ScalarType logical_dtype(const at::Tensor& self) {
    return self.scalar_type() == at::kByte ? at::kByte : at::kBool;
}

#define EMBER_LOGICAL(name, kOp)                                                                    \
    at::Tensor name##_dims(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim) {     \
        /* dim=[] reduces nothing here (unlike sum's): each element's own truth value */           \
        if (dim.has_value() && dim->empty()) return self.to(logical_dtype(self), false, true);      \
        const bool empty = self.numel() == 0 && !self.is_complex();                                 \
        if (!reducible(self) && !empty) return cpu<ATEN_OP2(name, dims)>(self, dim, keepdim);       \
        Plan p = make_plan(self, dim, keepdim);                                                     \
        at::Tensor out = at::empty(p.out_shape, self.options().dtype(logical_dtype(self)));         \
        /* over nothing: any is false, all is true (index_put_ with empty indices asks) */          \
        if (empty) return out.fill_(kOp == ReduceOp::kAll ? 1 : 0);                                 \
        queue_reduce(kOp, self, p, out);                                                            \
        return out;                                                                                 \
    }                                                                                               \
    at::Tensor name##_dim(const at::Tensor& self, int64_t dim, bool keepdim) {                      \
        return name##_dims(self, at::IntArrayRef(dim), keepdim);                                    \
    }                                                                                               \
    at::Tensor name##_all(const at::Tensor& self) { return name##_dims(self, std::nullopt, false); } \
    /* out=: the CPU's dtype rule (bool, or uint8 for a uint8 input) before anything is written. */ \
    at::Tensor& name##_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,   \
                                at::Tensor& out) {                                                  \
        TORCH_CHECK(out.scalar_type() == logical_dtype(self) || out.scalar_type() == at::kBool,     \
                    #name " only supports bool tensor for result, got: ", out.scalar_type());       \
        at::Tensor r = name##_dims(self, dim, keepdim);                                             \
        resize_out(out, r.sizes());                                                                 \
        return out.copy_(r);                                                                        \
    }

EMBER_LOGICAL(any, ReduceOp::kAny)
EMBER_LOGICAL(all, ReduceOp::kAll)
#undef EMBER_LOGICAL

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("sum", sum_all);
    m.impl("sum.dim_IntList", sum_dim);
    m.impl("sum.IntList_out", sum_out);
    m.impl("prod", prod_all);
    m.impl("prod.dim_int", prod_dim);
    m.impl("prod.int_out", prod_int_out);
    m.impl("mean", mean_all);
    m.impl("mean.dim", mean_dim);
    m.impl("mean.out", mean_out);
    m.impl("amax", amax_fn);
    m.impl("amax.out", amax_out);
    m.impl("amin", amin_fn);
    m.impl("amin.out", amin_out);
    m.impl("max.dim", max_dim);
    m.impl("max", max_all);
    m.impl("min.dim", min_dim);
    m.impl("min", min_all);
    m.impl("argmax", argmax_fn);
    m.impl("argmax.out", argmax_out);
    m.impl("argmin", argmin_fn);
    m.impl("argmin.out", argmin_out);
    m.impl("linalg_vector_norm", vector_norm);
    m.impl("linalg_vector_norm.out", vector_norm_out);
    m.impl("norm.ScalarOpt_dim", norm_dim);
    m.impl("norm.ScalarOpt_dim_dtype", norm_dim_dtype);
    m.impl("norm.out", norm_out);
    m.impl("norm.dtype_out", norm_dtype_out);
    m.impl("var.correction", var_correction);
    m.impl("std.correction", std_correction);
    m.impl("var_mean.correction", var_mean_correction);
    m.impl("std_mean.correction", std_mean_correction);
    m.impl("any.dims", any_dims);
    m.impl("any.dims_out", any_dims_out);
    m.impl("all.dims_out", all_dims_out);
    m.impl("any.dim", any_dim);
    m.impl("any", any_all);
    m.impl("all.dims", all_dims);
    m.impl("all.dim", all_dim);
    m.impl("all", all_all);
}

}  // namespace ember::torch_glue
