// Ops composed from other native ember ops (each call below dispatches to an ember kernel): logical
// ops, hardtanh, log-sigmoid, sgn of real tensors, a scalar raised to a tensor, clamps by a scalar
// on one side or by tensors, autograd's efficient zeros, the fused LSTM and GRU cells,
// embedding_bag, embedding_renorm_, weight norm.
// Each matches PyTorch's CPU results; forms these compositions do not cover (complex, an out= of
// another dtype) take the visible CPU fallback.
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Operators.h>
#include <torch/library.h>

#include "complex_parts.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

// ---- logical_and/or/xor, logical_not: truth values (x != 0) combined as bools, written in out's
// dtype (bool unless an out= says otherwise).

at::Tensor truth(const at::Tensor& t) { return t.scalar_type() == at::kBool ? t : at::ne(t, 0); }

bool logical_ok(const at::Tensor& a, const at::Tensor& out) {
    return !at::isComplexType(a.scalar_type()) && plain_dtype(out.scalar_type()) && out.is_privateuseone();
}

// out sized for the result r; a fresh (empty) out takes r's channels-last layout, as the
// CPU's TensorIterator gives an empty out= the layout of its inputs.
void resize_out_like(at::Tensor& out, const at::Tensor& r) {
    const auto fmt = r.suggest_memory_format();
    if (out.numel() == 0 && fmt != at::MemoryFormat::Contiguous && r.is_contiguous(fmt)) {
        out.resize_(r.sizes(), fmt);
        return;
    }
    resize_out(out, r.sizes());
}

#define EMBER_LOGICAL(name, combine)                                                                  \
    at::Tensor& name##_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {        \
        if (!logical_ok(self, out) || at::isComplexType(other.scalar_type()))                         \
            return cpu<ATEN_OP2(name, out)>(self, other, out);                                        \
        at::Tensor a = truth(self), b = truth(other);                                                 \
        at::Tensor r = combine;                                                                       \
        /* In place (out is an operand), broadcasting may not grow the output, as on CPU. */         \
        TORCH_CHECK(!(out.is_same(self) || out.is_same(other)) || out.sizes().equals(r.sizes()),      \
                    "output with shape ", out.sizes(), " doesn't match the broadcast shape ", r.sizes()); \
        resize_out_like(out, r);                                                                      \
        return out.copy_(r);                                                                          \
    }

EMBER_LOGICAL(logical_and, at::bitwise_and(a, b))
EMBER_LOGICAL(logical_or, at::bitwise_or(a, b))
EMBER_LOGICAL(logical_xor, at::ne(a, b))
#undef EMBER_LOGICAL

at::Tensor& logical_not_out(const at::Tensor& self, at::Tensor& out) {
    if (!logical_ok(self, out)) return cpu<ATEN_OP2(logical_not, out)>(self, out);
    at::Tensor r = at::eq(self, 0);
    resize_out_like(out, r);
    return out.copy_(r);
}

// ---- hardtanh = clamp(x, lo, hi); its gradient passes where lo < x < hi ----------------------

bool real_float(const at::Tensor& t) { return at::isFloatingType(t.scalar_type()) && t.is_privateuseone(); }

// Integer tensors keep their dtype: the CPU converts the bounds to it (truncating, checked).
bool integer_tensor(const at::Tensor& t) {
    return at::isIntegralType(t.scalar_type(), false) && t.scalar_type() != at::kUInt16 &&
           t.scalar_type() != at::kUInt32 && t.scalar_type() != at::kUInt64 && t.is_privateuseone();
}
c10::Scalar bound_for(const at::Tensor& t, const c10::Scalar& v) {
    TORCH_CHECK(t.scalar_type() != at::kByte || v.toDouble() >= 0,
                "cannot do hardtanh on an unsigned type with negative limits");
    return at::isIntegralType(t.scalar_type(), false) ? c10::Scalar(v.to<int64_t>()) : v;
}

at::Tensor& hardtanh_out(const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi, at::Tensor& out) {
    if (!(real_float(self) || integer_tensor(self)) || out.scalar_type() != self.scalar_type())
        return cpu<ATEN_OP2(hardtanh, out)>(self, lo, hi, out);
    return at::clamp_out(out, self, bound_for(self, lo), bound_for(self, hi));
}

at::Tensor hardtanh(const at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
    if (!(real_float(self) || integer_tensor(self))) return cpu<ATEN_OP(hardtanh)>(self, lo, hi);
    return at::clamp(self, bound_for(self, lo), bound_for(self, hi));
}

at::Tensor& hardtanh_(at::Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
    if (!(real_float(self) || integer_tensor(self))) return cpu<ATEN_OP(hardtanh_)>(self, lo, hi);
    return self.clamp_(bound_for(self, lo), bound_for(self, hi));
}

// The gradient where lo < self < hi, else 0. A fresh out takes the result's layout (a
// channels-last ReLU6's input gradient stays channels-last, as on the CPU).
at::Tensor& hardtanh_backward_out(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& lo,
                                  const c10::Scalar& hi, at::Tensor& grad_input) {
    if (!real_float(self) || !real_float(grad) || grad_input.scalar_type() != grad.scalar_type())
        return cpu<ATEN_OP2(hardtanh_backward, grad_input)>(grad, self, lo, hi, grad_input);
    at::Tensor pass = at::logical_and(at::gt(self, lo), at::lt(self, hi));
    at::Tensor r = at::where(pass, grad, at::zeros({}, grad.options()));
    resize_out_like(grad_input, r);
    return grad_input.copy_(r);
}

at::Tensor hardtanh_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& lo,
                             const c10::Scalar& hi) {
    at::Tensor out = at::empty({0}, grad.options());
    return hardtanh_backward_out(grad, self, lo, hi, out);
}

// ---- log_sigmoid(x) = -softplus(-x); its gradient is sigmoid(-x) ----------------------------
// (CPU returns a buffer for its backward; CUDA returns an empty one, as here.)

std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
    if (!real_float(self)) return cpu<ATEN_OP(log_sigmoid_forward)>(self);
    return {at::neg(at::softplus(at::neg(self))), at::empty({0}, self.options())};
}

at::Tensor log_sigmoid_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& buffer) {
    if (!real_float(self) || !real_float(grad)) return cpu<ATEN_OP(log_sigmoid_backward)>(grad, self, buffer);
    return at::mul(grad, at::sigmoid(at::neg(self)));
}

// ---- sgn of a real tensor is its sign ---------------------------------------------------------

at::Tensor& sgn_out(const at::Tensor& self, at::Tensor& out) {
    if (out.is_privateuseone())
        if (auto r = complex_unary("sgn", self); r && r->scalar_type() == out.scalar_type()) return write_out(out, *r);
    if (self.is_complex() || out.scalar_type() != self.scalar_type() || !self.is_privateuseone())
        return cpu<ATEN_OP2(sgn, out)>(self, out);
    return at::sign_out(out, self);
}

// ---- scalar ** tensor (rotary frequencies: 10000 ** (arange(d) / d)) -------------------------

at::Tensor& pow_scalar_out(const c10::Scalar& base, const at::Tensor& exponent, at::Tensor& out) {
    if (base.isComplex() || exponent.is_complex() || !exponent.is_privateuseone())
        return cpu<ATEN_OP2(pow, Scalar_out)>(base, exponent, out);
    if (base.equal(1.0)) {  // as CPU: ones, whatever the exponent
        resize_out(out, exponent.sizes());
        return out.fill_(1);
    }
    at::Tensor b = c10::scalar_to_tensor(base);
    b.unsafeGetTensorImpl()->set_wrapped_number(true);
    return at::pow_out(out, b, exponent);
}

// ---- clamp_min / clamp_max with a scalar bound --------------------------------------------------

at::Tensor& clamp_min_out(const at::Tensor& self, const c10::Scalar& lo, at::Tensor& out) {
    return at::clamp_out(out, self, lo, std::nullopt);
}

at::Tensor& clamp_max_out(const at::Tensor& self, const c10::Scalar& hi, at::Tensor& out) {
    return at::clamp_out(out, self, std::nullopt, hi);
}

// Tensor bounds: minimum(maximum(x, lo), hi), NaN-propagating like the CPU kernel (a NaN in the
// input or in either bound gives NaN).
at::Tensor clamp_tensors(const at::Tensor& self, const std::optional<at::Tensor>& lo,
                         const std::optional<at::Tensor>& hi, at::ScalarType type) {
    at::Tensor r = self.to(type);
    if (lo && lo->defined()) {
        at::Tensor l = lo->to(type);
        r = at::maximum(r, l);
    }
    if (hi && hi->defined()) {
        at::Tensor h = hi->to(type);
        r = at::minimum(r, h);
    }
    return r;
}

// Bool tensors clamp against one tensor bound only (or / and), as on the CPU, which refuses both.
bool clamp_tensors_native(const at::Tensor& self, at::ScalarType type, const at::Tensor& out, bool one_bound = false) {
    return plain_dtype(type) && (type != at::kBool || one_bound) && out.is_privateuseone() &&
           !at::isComplexType(self.scalar_type());
}

at::Tensor& clamp_tensor_out(const at::Tensor& self, const std::optional<at::Tensor>& lo,
                             const std::optional<at::Tensor>& hi, at::Tensor& out) {
    const bool has_lo = lo && lo->defined(), has_hi = hi && hi->defined();
    TORCH_CHECK(has_lo || has_hi, "torch.clamp: At least one of 'min' or 'max' must not be None");
    at::ScalarType type = self.scalar_type();
    if (has_lo) type = at::promote_types(type, at::result_type(self, *lo));
    if (has_hi) type = at::promote_types(type, at::result_type(self, *hi));
    if (!clamp_tensors_native(self, type, out) || out.scalar_type() != type)
        return cpu<ATEN_OP2(clamp, Tensor_out)>(self, lo, hi, out);
    at::Tensor r = clamp_tensors(self, lo, hi, type);
    resize_out(out, r.sizes());
    return out.copy_(r);
}

at::Tensor& clamp_min_tensor_out(const at::Tensor& self, const at::Tensor& lo, at::Tensor& out) {
    at::ScalarType type = at::result_type(self, lo);
    if (!clamp_tensors_native(self, type, out, true) || out.scalar_type() != type)
        return cpu<ATEN_OP2(clamp_min, Tensor_out)>(self, lo, out);
    at::Tensor r = clamp_tensors(self, lo, std::nullopt, type);
    resize_out(out, r.sizes());
    return out.copy_(r);
}

at::Tensor& clamp_max_tensor_out(const at::Tensor& self, const at::Tensor& hi, at::Tensor& out) {
    at::ScalarType type = at::result_type(self, hi);
    if (!clamp_tensors_native(self, type, out, true) || out.scalar_type() != type)
        return cpu<ATEN_OP2(clamp_max, Tensor_out)>(self, hi, out);
    at::Tensor r = clamp_tensors(self, std::nullopt, hi, type);
    resize_out(out, r.sizes());
    return out.copy_(r);
}

// ---- conj_physical: negate the imaginary part in place (real tensors are their own conjugate) --

at::Tensor& conj_physical_inplace(at::Tensor& self) {
    if (!self.is_complex()) return self;
    // Conjugating the logical values conjugates the stored ones, whatever lazy conjugate or
    // negation bit self carries: the stored values are negated in their imaginary part.
    at::Tensor stored = self;
    if (stored.is_conj()) stored = stored.conj();
    if (stored.is_neg()) stored = at::_neg_view(stored);
    at::view_as_real(stored).select(-1, 1).neg_();
    return self;
}

at::Tensor& conj_physical_out(const at::Tensor& self, at::Tensor& out) {
    if (!self.is_complex() || out.scalar_type() != self.scalar_type() || !out.is_privateuseone() || self.is_conj())
        return cpu<ATEN_OP2(conj_physical, out)>(self, out);
    resize_out(out, self.sizes(), {});
    if (!out.is_same(self)) at::view_as_real(out).copy_(at::view_as_real(self));
    return conj_physical_inplace(out);
}

// ---- _efficientzerotensor: autograd's "zero gradient" (sgn, torch.func) -------------------------
// CUDA returns a ZeroTensor that owns no memory; ember returns real zeros, which every op reads
// the same way (at the cost of the memory).
at::Tensor efficientzerotensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory) {
    return at::zeros(size, at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory));
}

// ---- embedding_bag: rows gathered with index_select, reduced per bag with index_add (sum,
// mean) or scatter_reduce (max). offset2bag (each index's bag), bag_size (offsets.size(0)
// entries, the count of non-padding indices per bag) and max_indices ([bags, dim] for max, else
// empty) have CUDA's shapes and the indices' dtype, as PyTorch's meta kernels say for an
// accelerator; only the backward below reads them. Sparse gradients take the CPU path.

constexpr int64_t kBagSum = 0, kBagMean = 1, kBagMax = 2;

bool bag_native(const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool sparse) {
    return !sparse && weight.is_privateuseone() && weight.dim() == 2 && at::isFloatingType(weight.scalar_type()) &&
           plain_dtype(weight.scalar_type()) && indices.dim() == 1 && offsets.dim() == 1;
}

// Low-precision weights are summed in float, as CPU does.
at::ScalarType bag_acc(const at::Tensor& weight) {
    return at::isReducedFloatingType(weight.scalar_type()) ? at::kFloat : weight.scalar_type();
}

struct Bags {
    at::Tensor idx;        // int64 [n]
    at::Tensor offset2bag; // int64 [n]
    at::Tensor valid;      // bool [n], or undefined without padding_idx
    at::Tensor count;      // int64 [bags]: non-padding indices per bag
    int64_t bags;
};

Bags make_bags(const at::Tensor& indices, const at::Tensor& offsets, bool include_last_offset, int64_t padding_idx) {
    TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
                "embedding_bag: expected indices to be long or int, got ", indices.scalar_type());
    TORCH_CHECK(offsets.scalar_type() == indices.scalar_type(), "embedding_bag: expected offsets (",
                offsets.scalar_type(), ") to have the same dtype as indices (", indices.scalar_type(), ")");
    TORCH_CHECK(!include_last_offset || offsets.size(0) >= 1, "include_last_offset: numBags should be at least 1");
    Bags b;
    const int64_t n = indices.size(0);
    if (offsets.numel() > 0) {
        // The CPU kernel's checks, made on the device without waiting for it (a failure surfaces
        // at the next synchronizing call, as an index error does): bags that start elsewhere
        // than 0, past the end or before the previous bag would be summed from the wrong rows.
        at::Tensor o = offsets.to(at::kLong);
        at::_assert_async(o[0].eq(0), "embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the "
                                      "mini-batch has to start from position 0");
        at::_assert_async(o[-1].le(n), "embedding_bag: offsets[-1] can not be greater than input's length");
        if (o.numel() > 1) at::_assert_async(o.diff().min().ge(0), "embedding_bag: offsets must be non-decreasing");
        // With include_last_offset, indices past the last offset belong to no bag; the CPU drops
        // them from sums and means but not from maxima.
        if (include_last_offset && o.numel() > 1)
            at::_assert_async(o[-1].eq(n), "embedding_bag: with include_last_offset=True the last offset must "
                                           "equal the number of indices");
    }
    b.bags = offsets.size(0) - (include_last_offset ? 1 : 0);
    b.idx = indices.to(at::kLong);
    if (b.bags == 0) {  // include_last_offset with one offset: no bags, the indices belong to none
        b.offset2bag = at::zeros({n}, b.idx.options());
        b.count = at::zeros({0}, b.idx.options());
        return b;
    }
    // Each bag start adds one at its offset; a running sum then names each index's bag. Empty
    // bags add twice at one place and are skipped. An offset past the end is an index error.
    at::Tensor starts = offsets.slice(0, 0, b.bags).to(at::kLong);
    at::Tensor marks = at::zeros({n + 1}, b.idx.options()).index_add_(0, starts, at::ones({b.bags}, b.idx.options()));
    b.offset2bag = marks.cumsum(0).slice(0, 0, n).sub_(1);
    if (padding_idx >= 0) b.valid = b.idx.ne(padding_idx);
    at::Tensor one = b.valid.defined() ? b.valid.to(at::kLong) : at::ones({n}, b.idx.options());
    b.count = at::zeros({b.bags}, b.idx.options()).index_add_(0, b.offset2bag, one);
    return b;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool scale_grad_by_freq,
    int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
    int64_t padding_idx) {
    if (!bag_native(weight, indices, offsets, sparse))
        return cpu<ATEN_OP(_embedding_bag)>(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                                            per_sample_weights, include_last_offset, padding_idx);
    TORCH_CHECK(mode >= kBagSum && mode <= kBagMax, "embedding_bag: unknown mode ", mode);
    const bool psw = per_sample_weights.has_value() && per_sample_weights->defined();
    if (psw) {
        TORCH_CHECK(mode == kBagSum, "embedding_bag: per_sample_weights only supported with mode='sum'");
        TORCH_CHECK(per_sample_weights->dim() == 1 && per_sample_weights->numel() == indices.numel(),
                    "embedding_bag: expected per_sample_weights to be 1D with ", indices.numel(), " elements, got ",
                    per_sample_weights->sizes());
    }
    Bags b = make_bags(indices, offsets, include_last_offset, padding_idx);
    const int64_t dim = weight.size(1);
    if (b.bags == 0)
        return {at::zeros({0, dim}, weight.options()), b.offset2bag.to(indices.scalar_type()),
                at::zeros({offsets.size(0)}, indices.options()),
                mode == kBagMax ? at::zeros({0, dim}, indices.options()) : at::empty({0}, indices.options())};
    const at::ScalarType acc = bag_acc(weight);
    at::Tensor rows = weight.index_select(0, b.idx).to(acc);
    if (psw) rows = rows.mul(per_sample_weights->to(acc).unsqueeze(1));
    auto out_opts = weight.options().dtype(acc);
    at::Tensor out, max_indices;
    if (mode == kBagMax) {
        const double ninf = -std::numeric_limits<double>::infinity();
        if (b.valid.defined()) rows = at::where(b.valid.unsqueeze(1), rows, at::scalar_tensor(ninf, out_opts));
        at::Tensor bag2d = b.offset2bag.unsqueeze(1).expand({b.idx.size(0), dim});
        out = at::full({b.bags, dim}, ninf, out_opts).scatter_reduce(0, bag2d, rows, "amax", /*include_self=*/true);
        at::Tensor empty = b.count.eq(0).unsqueeze(1);
        out = at::where(empty, at::scalar_tensor(0.0, out_opts), out);
        // The first index in the bag that holds the maximum, as CPU and CUDA pick it.
        const int64_t n = b.idx.size(0);
        at::Tensor pos = at::arange(n, b.idx.options()).unsqueeze(1).expand({n, dim});
        at::Tensor hit = rows.eq(out.index_select(0, b.offset2bag));
        at::Tensor first = at::full({b.bags, dim}, n, b.idx.options())
                               .scatter_reduce(0, bag2d, at::where(hit, pos, at::scalar_tensor(n, b.idx.options())),
                                               "amin", /*include_self=*/true);
        at::Tensor found = first.lt(n);
        at::Tensor row_of = b.idx.index_select(0, first.clamp_max(std::max<int64_t>(n - 1, 0)).view(-1)).view_as(first);
        max_indices = at::where(found, n > 0 ? row_of : first, at::scalar_tensor(-1, b.idx.options()))
                          .to(indices.scalar_type());
    } else {
        if (b.valid.defined()) rows = at::where(b.valid.unsqueeze(1), rows, at::scalar_tensor(0.0, out_opts));
        out = at::zeros({b.bags, dim}, out_opts).index_add_(0, b.offset2bag, rows);
        if (mode == kBagMean) out = out.div_(b.count.clamp_min(1).to(acc).unsqueeze(1));
        max_indices = at::empty({0}, indices.options());
    }
    at::Tensor bag_size = at::zeros({offsets.size(0)}, indices.options());
    bag_size.slice(0, 0, b.bags).copy_(b.count);
    return {out.to(weight.scalar_type()), b.offset2bag.to(indices.scalar_type()), bag_size, max_indices};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag_forward_only(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool scale_grad_by_freq,
    int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights, bool include_last_offset,
    int64_t padding_idx) {
    if (!bag_native(weight, indices, offsets, sparse))
        return cpu<ATEN_OP(_embedding_bag_forward_only)>(weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                                                         per_sample_weights, include_last_offset, padding_idx);
    return embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                         include_last_offset, padding_idx);
}

// d(weight): each index's row receives its bag's gradient (times its sample weight, divided by
// the bag's size for mean, by the index's frequency with scale_grad_by_freq); for max only the
// row that held each maximum receives it. Padding indices receive nothing.
at::Tensor embedding_bag_dense_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offset2bag,
                                        const at::Tensor& bag_size, const at::Tensor& maximum_indices,
                                        int64_t num_weights, bool scale_grad_by_freq, int64_t mode,
                                        const std::optional<at::Tensor>& per_sample_weights, int64_t padding_idx) {
    if (!grad.is_privateuseone() || grad.dim() != 2 || !plain_dtype(grad.scalar_type()) ||
        !at::isFloatingType(grad.scalar_type()))
        return cpu_symint<ATEN_OP(_embedding_bag_dense_backward)>(grad, indices, offset2bag, bag_size, maximum_indices,
                                                                  c10::SymInt(num_weights), scale_grad_by_freq, mode,
                                                                  per_sample_weights, padding_idx);
    const int64_t dim = grad.size(1);
    const at::ScalarType acc = bag_acc(grad);
    at::Tensor g = grad.to(acc);
    at::Tensor idx = indices.to(at::kLong);
    at::Tensor gw = at::zeros({num_weights, dim}, grad.options().dtype(acc));
    at::Tensor freq;
    if (scale_grad_by_freq) freq = at::bincount(idx, {}, num_weights).to(acc).clamp_min(1);
    if (mode == kBagMax) {
        at::Tensor mi = maximum_indices.to(at::kLong);
        at::Tensor found = mi.ge(0);
        at::Tensor contrib = at::where(found, g, at::scalar_tensor(0.0, g.options()));
        at::Tensor row = mi.clamp_min(0);
        if (freq.defined()) contrib = contrib.div(freq.index_select(0, row.view(-1)).view_as(row));
        at::Tensor flat = row.mul(dim).add(at::arange(dim, row.options()).unsqueeze(0));
        gw.view(-1).index_add_(0, flat.view(-1), contrib.reshape(-1));
        return gw.to(grad.scalar_type());
    }
    at::Tensor o2b = offset2bag.to(at::kLong);
    at::Tensor rows = g.index_select(0, o2b);
    if (mode == kBagMean) rows = rows.div(bag_size.to(at::kLong).index_select(0, o2b).clamp_min(1).to(acc).unsqueeze(1));
    if (per_sample_weights.has_value() && per_sample_weights->defined())
        rows = rows.mul(per_sample_weights->to(acc).unsqueeze(1));
    if (freq.defined()) rows = rows.div(freq.index_select(0, idx).unsqueeze(1));
    if (padding_idx >= 0)
        rows = at::where(idx.ne(padding_idx).unsqueeze(1), rows, at::scalar_tensor(0.0, rows.options()));
    gw.index_add_(0, idx, rows);
    return gw.to(grad.scalar_type());
}

at::Tensor embedding_bag_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offsets,
                                  const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                  const at::Tensor& maximum_indices, int64_t num_weights, bool scale_grad_by_freq,
                                  int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                                  int64_t padding_idx) {
    // Sparse tensors do not exist on ember: a sparse gradient made on the CPU could not come back.
    TORCH_CHECK_NOT_IMPLEMENTED(!sparse, "embedding_bag: sparse gradients (sparse=True) are not supported on the ember "
                                "device; use sparse=False (dense gradients)");
    return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                        scale_grad_by_freq, mode, per_sample_weights, padding_idx);
}

// d(per_sample_weights)[i] = <grad of i's bag, weight row of index i>; 0 for padding.
at::Tensor embedding_bag_per_sample_weights_backward(const at::Tensor& grad, const at::Tensor& weight,
                                                     const at::Tensor& indices, const at::Tensor& offsets,
                                                     const at::Tensor& offset2bag, int64_t mode, int64_t padding_idx) {
    if (!grad.is_privateuseone() || !plain_dtype(grad.scalar_type()) || !at::isFloatingType(grad.scalar_type()))
        return cpu<ATEN_OP(_embedding_bag_per_sample_weights_backward)>(grad, weight, indices, offsets, offset2bag,
                                                                        mode, padding_idx);
    TORCH_CHECK(mode == kBagSum, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
    const at::ScalarType acc = bag_acc(grad);
    at::Tensor idx = indices.to(at::kLong);
    at::Tensor r = grad.to(acc).index_select(0, offset2bag.to(at::kLong)).mul(weight.to(acc).index_select(0, idx)).sum(1);
    if (padding_idx >= 0) r = at::where(idx.ne(padding_idx), r, at::scalar_tensor(0.0, r.options()));
    return r.to(grad.scalar_type());
}

// ---- weight norm: w = v * g / |v|, the norm over every dim but `dim` (nn.utils.weight_norm and
// its parametrization, e.g. wav2vec2's positional convolution). Norms are [dim's size] shaped
// like g, in float for low-precision inputs as on CPU.

std::vector<int64_t> other_dims(const at::Tensor& v, int64_t dim) {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < v.dim(); ++d)
        if (d != dim) dims.push_back(d);
    return dims;
}

bool weight_norm_native(const at::Tensor& v, const at::Tensor& g) {
    return v.is_privateuseone() && g.is_privateuseone() && at::isFloatingType(v.scalar_type()) &&
           plain_dtype(v.scalar_type()) && v.dim() > 0;
}

std::tuple<at::Tensor, at::Tensor> weight_norm_interface(const at::Tensor& v, const at::Tensor& g, int64_t dim) {
    if (!weight_norm_native(v, g)) return cpu<ATEN_OP(_weight_norm_interface)>(v, g, dim);
    dim = at::maybe_wrap_dim(dim, v.dim());
    const at::ScalarType acc = bag_acc(v);
    at::Tensor norms = v.to(acc).square().sum(other_dims(v, dim), /*keepdim=*/true).sqrt();
    at::Tensor w = v.to(acc).mul(g.to(acc).div(norms)).to(v.scalar_type());
    return {w, norms.reshape(g.sizes())};
}

std::tuple<at::Tensor, at::Tensor> weight_norm_interface_backward(const at::Tensor& grad_w, const at::Tensor& v,
                                                                   const at::Tensor& g, const at::Tensor& norms,
                                                                   int64_t dim) {
    if (!weight_norm_native(v, g) || !grad_w.is_privateuseone())
        return cpu<ATEN_OP(_weight_norm_interface_backward)>(grad_w, v, g, norms, dim);
    dim = at::maybe_wrap_dim(dim, v.dim());
    const at::ScalarType acc = bag_acc(v);
    std::vector<int64_t> keep(v.dim(), 1);
    keep[dim] = v.size(dim);
    at::Tensor n = norms.to(acc).reshape(keep), gk = g.to(acc).reshape(keep);
    at::Tensor gw = grad_w.to(acc), vv = v.to(acc);
    // d/dg = <grad_w, v> / |v|;  d/dv = g / |v| * (grad_w - v * (d/dg) / |v|)
    at::Tensor grad_g = gw.mul(vv).sum(other_dims(v, dim), /*keepdim=*/true).div(n);
    at::Tensor grad_v = gk.div(n).mul(gw.sub(vv.mul(grad_g.div(n))));
    return {grad_v.to(v.scalar_type()), grad_g.reshape(g.sizes()).to(g.scalar_type())};
}

// ---- embedding_renorm_ (nn.Embedding(max_norm=...)): each row the indices name is scaled down
// to max_norm when its norm is larger, in place, as CPU does (max_norm / (norm + 1e-7)).
at::Tensor& embedding_renorm(at::Tensor& self, const at::Tensor& indices, double max_norm, double norm_type) {
    if (!self.is_privateuseone() || self.dim() != 2 || !at::isFloatingType(self.scalar_type()) ||
        !plain_dtype(self.scalar_type()))
        return cpu<ATEN_OP(embedding_renorm_)>(self, indices, max_norm, norm_type);
    TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
                "embedding_renorm_: expected indices to have type Long or Int but got: ", indices.scalar_type());
    at::Tensor idx = indices.reshape({-1}).to(at::kLong);
    const at::ScalarType acc = bag_acc(self);
    at::Tensor rows = self.index_select(0, idx).to(acc);
    at::Tensor norms = at::linalg_vector_norm(rows, norm_type, {1}, /*keepdim=*/true);
    at::Tensor scale = at::where(norms.gt(max_norm), norms.add(1e-7).reciprocal().mul(max_norm),
                                 at::scalar_tensor(1.0, norms.options()));
    // A repeated index writes the same scaled row each time.
    self.index_put_({idx}, rows.mul(scale).to(self.scalar_type()));
    return self;
}

}  // namespace

// ---- fused LSTM / GRU cells -------------------------------------------------------------------
// nn.LSTM / nn.GRU on an accelerator call these per time step (the CPU has no kernel for them).
// The gates come precomputed by two matmuls; the cell applies the activations. The workspace
// keeps what the backward needs, shaped as PyTorch's meta functions say: LSTM (B, 4H) activated
// gates [i f g o]; GRU (B, 5H) [r z n hx hidden_n].

at::Tensor with_biases(at::Tensor gates, const std::optional<at::Tensor>& a, const std::optional<at::Tensor>& b) {
    if (a.has_value() && a->defined()) gates = gates + *a;
    if (b.has_value() && b->defined()) gates = gates + *b;
    return gates;
}

void check_cell(const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& prev, int64_t factor,
                const char* name) {
    TORCH_CHECK(ig.dim() == 2 && ig.sizes() == hg.sizes(), name, ": input_gates ", ig.sizes(),
                " and hidden_gates ", hg.sizes(), " must be equal 2-d shapes");
    TORCH_CHECK(prev.dim() == 2 && prev.size(0) == ig.size(0) && prev.size(1) * factor == ig.size(1), name,
                ": state ", prev.sizes(), " does not match gates ", ig.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates,
                                                         const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
    check_cell(input_gates, hidden_gates, cx, 4, "_thnn_fused_lstm_cell");
    at::Tensor gates = with_biases(input_gates + hidden_gates, input_bias, hidden_bias);
    auto c = gates.chunk(4, 1);
    at::Tensor i = c[0].sigmoid(), f = c[1].sigmoid(), g = c[2].tanh(), o = c[3].sigmoid();
    at::Tensor cy = f * cx + i * g;
    at::Tensor hy = o * cy.tanh();
    return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
    const bool ghy = grad_hy.has_value() && grad_hy->defined(), gcy = grad_cy.has_value() && grad_cy->defined();
    if (!ghy && !gcy) return {at::Tensor(), at::Tensor(), at::Tensor()};
    auto w = workspace.chunk(4, 1);
    const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
    at::Tensor tcy = cy.tanh();
    at::Tensor dc = gcy ? grad_cy->clone() : at::zeros_like(cy);
    at::Tensor go = at::zeros_like(o);
    if (ghy) {
        dc = dc + *grad_hy * o * (1 - tcy * tcy);
        go = *grad_hy * tcy;
    }
    at::Tensor gi = dc * g * i * (1 - i);
    at::Tensor gf = dc * cx * f * (1 - f);
    at::Tensor gg = dc * i * (1 - g * g);
    go = go * o * (1 - o);
    at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
    at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
    return {grad_gates, dc * f, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
    check_cell(input_gates, hidden_gates, hx, 3, "_thnn_fused_gru_cell");
    auto ic = with_biases(input_gates, input_bias, std::nullopt).chunk(3, 1);
    auto hc = with_biases(hidden_gates, hidden_bias, std::nullopt).chunk(3, 1);
    at::Tensor r = (ic[0] + hc[0]).sigmoid(), z = (ic[1] + hc[1]).sigmoid();
    at::Tensor n = (ic[2] + r * hc[2]).tanh();
    at::Tensor hy = n + z * (hx - n);
    return {hy, at::cat({r, z, n, hx, hc[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
    auto w = workspace.chunk(5, 1);
    const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
    at::Tensor gn = grad_hy * (1 - z) * (1 - n * n);
    at::Tensor gz = grad_hy * (hx - n) * z * (1 - z);
    at::Tensor gr = gn * hn * r * (1 - r);
    at::Tensor grad_input = at::cat({gr, gz, gn}, 1);
    at::Tensor grad_hidden = at::cat({gr, gz, gn * r}, 1);
    at::Tensor gib = has_bias ? grad_input.sum(0) : at::Tensor();
    at::Tensor ghb = has_bias ? grad_hidden.sum(0) : at::Tensor();
    return {grad_input, grad_hidden, grad_hy * z, gib, ghb};
}

// ---- kaiser_window: PyTorch's composite fills the window through a dispatch stub that only CPU
// and CUDA register, so ember computes the formula with its own ops, in float (double for a
// float64 window): w[k] = I0(beta * sqrt(1 - ((k - a) / a)^2)) / I0(beta), a = (N - 1) / 2, over
// N + 1 points less the last when periodic (PyTorch's defaults: periodic, beta 12).
at::Tensor kaiser_window(int64_t window_length, bool periodic, double beta, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
    auto options = at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory);
    TORCH_CHECK(options.layout() != at::kSparse, "kaiser_window is not implemented for sparse types, got: ",
                options);
    TORCH_CHECK(at::isFloatingType(c10::typeMetaToScalarType(options.dtype())),
                "kaiser_window expects floating point dtypes, got: ", options);
    TORCH_CHECK(window_length >= 0, "kaiser_window requires non-negative window_length, got window_length=",
                window_length);
    if (window_length == 0) return at::empty({0}, options);
    if (window_length == 1) return at::ones({1}, options);
    const int64_t n = periodic ? window_length + 1 : window_length;
    const auto out_dtype = c10::typeMetaToScalarType(options.dtype());
    auto compute = options.dtype(out_dtype == at::kDouble ? at::kDouble : at::kFloat);
    const double alpha = static_cast<double>(n - 1) / 2.0;
    at::Tensor t = at::arange(n, compute).sub_(alpha).div_(alpha);
    at::Tensor w = at::i0(t.mul_(t).neg_().add_(1).sqrt_().mul_(beta)).div_(at::i0(at::scalar_tensor(beta, compute)));
    w = w.to(out_dtype);
    return periodic ? w.narrow(0, 0, window_length) : w;
}

at::Tensor kaiser_window_periodic(int64_t window_length, bool periodic, std::optional<at::ScalarType> dtype,
                                  std::optional<at::Layout> layout, std::optional<at::Device> device,
                                  std::optional<bool> pin_memory) {
    return kaiser_window(window_length, periodic, 12.0, dtype, layout, device, pin_memory);
}

at::Tensor kaiser_window_default(int64_t window_length, std::optional<at::ScalarType> dtype,
                                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                                 std::optional<bool> pin_memory) {
    return kaiser_window(window_length, true, 12.0, dtype, layout, device, pin_memory);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("kaiser_window", kaiser_window_default);
    m.impl("kaiser_window.periodic", kaiser_window_periodic);
    m.impl("kaiser_window.beta", kaiser_window);
    m.impl("_embedding_bag", embedding_bag);
    m.impl("embedding_renorm_", embedding_renorm);
    m.impl("_weight_norm_interface", weight_norm_interface);
    m.impl("_weight_norm_interface_backward", weight_norm_interface_backward);
    m.impl("_embedding_bag_forward_only", embedding_bag_forward_only);
    m.impl("_embedding_bag_dense_backward", embedding_bag_dense_backward);
    m.impl("_embedding_bag_backward", embedding_bag_backward);
    m.impl("_embedding_bag_per_sample_weights_backward", embedding_bag_per_sample_weights_backward);
    m.impl("_thnn_fused_lstm_cell", lstm_cell);
    m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
    m.impl("_thnn_fused_gru_cell", gru_cell);
    m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
    m.impl("_efficientzerotensor", efficientzerotensor);
    m.impl("conj_physical_", conj_physical_inplace);
    m.impl("conj_physical.out", conj_physical_out);
    m.impl("logical_and.out", logical_and_out);
    m.impl("logical_or.out", logical_or_out);
    m.impl("logical_xor.out", logical_xor_out);
    m.impl("logical_not.out", logical_not_out);
    m.impl("hardtanh", hardtanh);
    m.impl("hardtanh.out", hardtanh_out);
    m.impl("hardtanh_", hardtanh_);
    m.impl("hardtanh_backward", hardtanh_backward);
    m.impl("hardtanh_backward.grad_input", hardtanh_backward_out);
    m.impl("log_sigmoid_forward", log_sigmoid_forward);
    m.impl("log_sigmoid_backward", log_sigmoid_backward);
    m.impl("sgn.out", sgn_out);
    m.impl("pow.Scalar_out", pow_scalar_out);
    m.impl("clamp_min.out", clamp_min_out);
    m.impl("clamp_max.out", clamp_max_out);
    m.impl("clamp.Tensor_out", clamp_tensor_out);
    m.impl("clamp_min.Tensor_out", clamp_min_tensor_out);
    m.impl("clamp_max.Tensor_out", clamp_max_tensor_out);
}

}  // namespace ember::torch_glue
