// Indexing and shape ops: cat, index_select (embedding's forward), embedding's backward,
// tril/triu, the scans (cumsum, cumprod, logcumsumexp, cummax/cummin) and arange, on core's
// kernels/index, kernels/reduce/scan and kernels/fill. Inputs these kernels do
// not cover take the CPU fallback.
#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../context.h"
#include "../fallback.h"
#include "kernels/fill.h"
#include "kernels/index/histogram.h"
#include "kernels/index/index.h"
#include "kernels/reduce/scan.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

// ---- cat --------------------------------------------------------------------------------------

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
    auto list = tensors.materialize();
    // CPU's rule: the inputs' promoted type must cast to out's without losing its kind.
    if (!list.empty()) {
        c10::ScalarType rt = at::native::result_type(tensors);
        TORCH_CHECK(c10::canCast(rt, out.scalar_type()),
                    "torch.cat(): input types can't be cast to the desired output type ", out.scalar_type());
    }
    // PyTorch skips legacy empty 1-d tensors (shape [0]) when checking shapes.
    auto skip = [](const at::Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
    const at::Tensor* ref = nullptr;
    for (const at::Tensor& t : list) if (!skip(t)) { ref = &t; break; }
    if (ref == nullptr && !list.empty() && plain_dtype(out.scalar_type())) {
        // Only legacy empty tensors: the result is one too, whatever dim says (as on the CPU).
        bool here = true;
        for (const at::Tensor& t : list) here = here && t.device() == out.device() && plain_dtype(t.scalar_type());
        if (here) {
            resize_out(out, std::vector<int64_t>{0});
            return out;
        }
    }
    // Complex pieces are copied like any others (copy_ converts them and resolves conjugation).
    auto copyable = [](c10::ScalarType t) { return plain_dtype(t) || t == at::kComplexFloat || t == at::kComplexDouble; };
    bool ok = ref != nullptr && copyable(out.scalar_type()) && (plain_dtype(out.scalar_type()) || !out.is_conj());
    if (ok) {
        dim = at::maybe_wrap_dim(dim, ref->dim());
        for (const at::Tensor& t : list) {
            if (skip(t)) continue;
            ok = ok && t.dim() == ref->dim() && t.device() == out.device() && copyable(t.scalar_type()) &&
                 at::isComplexType(t.scalar_type()) == at::isComplexType(out.scalar_type());
            for (int64_t d = 0; ok && d < t.dim(); ++d) ok = d == dim || t.size(d) == ref->size(d);
        }
    }
    if (!ok) return cpu<ATEN_OP2(cat, out)>(tensors, dim, out);
    std::vector<int64_t> shape(ref->sizes().begin(), ref->sizes().end());
    shape[dim] = 0;
    for (const at::Tensor& t : list) if (!skip(t)) shape[dim] += t.size(dim);
    // The CPU's layout rule: a result it allocates or resizes takes the inputs' memory format
    // when they all suggest the same one (channels_last stays channels_last), else contiguous.
    std::optional<at::MemoryFormat> format;
    for (const at::Tensor& t : list) {
        if (skip(t)) continue;
        const auto f = t.suggest_memory_format();
        format = !format || *format == f ? f : at::MemoryFormat::Contiguous;
    }
    const bool resized = out.sizes() != c10::IntArrayRef(shape);
    resize_out(out, shape);
    if (resized && format && *format != at::MemoryFormat::Contiguous) out.resize_(shape, *format);
    int64_t offset = 0;
    for (const at::Tensor& t : list) {
        if (skip(t)) continue;
        if (t.size(dim) > 0) out.narrow(dim, offset, t.size(dim)).copy_(t);
        offset += t.size(dim);
    }
    return out;
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
    auto list = tensors.materialize();
    c10::ScalarType rt = at::native::result_type(tensors);
    c10::Device device = list.empty() ? c10::Device(c10::kCPU) : list.front().get().device();
    for (const at::Tensor& t : list) if (t.device().type() == c10::DeviceType::PrivateUse1) device = t.device();
    at::Tensor out = at::empty({0}, list.empty() ? at::TensorOptions() : list.front().get().options().dtype(rt).device(device));
    return cat_out(tensors, dim, out);
}

// ---- index_select and embedding backward ------------------------------------------------------

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
    // int32 indices (as CPU and CUDA take them) are widened on the device; kernels read int64.
    if (index.scalar_type() == at::kInt && index.device() == self.device())
        return index_select_out(self, dim, index.to(at::kLong), out);
    bool ok = index.scalar_type() == at::kLong && index.dim() <= 1 && index.device() == self.device() &&
              out.scalar_type() == self.scalar_type() && plain_dtype(self.scalar_type()) &&
              (self.dim() > 0 || index.numel() == 1);
    if (!ok) return cpu<ATEN_OP2(index_select, out)>(self, dim, index, out);
    if (self.dim() == 0) {
        // A 0-d self takes one index (0, checked by the kernel) and gives a 0-d result.
        at::maybe_wrap_dim(dim, 0);
        at::Tensor one = at::empty({1}, out.options());
        index_select_out(self.reshape({1}), 0, index, one);
        resize_out(out, c10::IntArrayRef(), {&self, &index});
        return out.copy_(one.squeeze(0));
    }
    dim = at::maybe_wrap_dim(dim, self.dim());
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    at::Tensor idx = index.reshape({-1}).contiguous();
    shape[dim] = idx.size(0);
    // As the CPU: an out= that overlaps itself (before any resize), the input or the index is refused.
    at::assert_no_internal_overlap(out);
    resize_out(out, shape, {&self, &index});
    at::assert_no_overlap(out, self);
    at::assert_no_overlap(out, index);
    if (out.numel() == 0) return out;
    at::Tensor src = self.contiguous();
    at::Tensor dst = out.is_contiguous() ? out : at::empty(shape, out.options());
    kernels::TensorView o = fold3(dst, dim), i = fold3(src, dim, false), x = view_in(idx);
    queue(dst, "index_select", [o, i, x](runtime::ThreadPool* p) {
        return kernels::index_select(o, i, x, p);
    });
    if (!dst.is_same(out)) out.copy_(dst);
    return out;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
    at::Tensor out = at::empty({0}, self.options());
    return index_select_out(self, dim, index, out);
}

at::Tensor embedding_dense_backward(const at::Tensor& grad, const at::Tensor& indices, c10::SymInt num_weights,
                                    c10::SymInt padding_idx, bool scale_grad_by_freq) {
    if (indices.scalar_type() == at::kInt && on_device(grad.device(), indices))
        return embedding_dense_backward(grad, indices.to(at::kLong), num_weights, padding_idx, scale_grad_by_freq);
    bool ok = indices.scalar_type() == at::kLong && at::isFloatingType(grad.scalar_type()) &&
              on_device(grad.device(), indices);
    if (!ok) {
        return cpu_symint<ATEN_OP(embedding_dense_backward)>(grad, indices, num_weights, padding_idx, scale_grad_by_freq);
    }
    int64_t rows = num_weights.expect_int();
    int64_t width = grad.size(-1);
    at::Tensor idx = indices.reshape({-1}).contiguous();
    at::Tensor src = grad.contiguous().view({idx.size(0), width});
    if (scale_grad_by_freq) {
        // Each row's gradient divided by how often its index occurs in the batch, as the CPU
        // scales it (1 / count in the gradient's dtype) before adding.
        at::Tensor counts = at::zeros({rows}, idx.options()).index_add_(0, idx, at::ones_like(idx));
        src = src.mul(counts.index_select(0, idx).to(grad.scalar_type()).reciprocal().unsqueeze(1));
    }
    // 16-bit gradients of a repeated token are summed in float and rounded once, as CUDA's
    // kernel does: summed in bfloat16, a row's total stops growing at 256 ones.
    const bool half = half_float(grad.scalar_type());
    if (half) src = src.to(at::kFloat);
    at::Tensor out = at::zeros({rows, width}, src.options());
    kernels::TensorView o = view_of(out), s = view_in(src), x = view_in(idx);
    int64_t skip = padding_idx.expect_int();
    queue(out, "embedding_dense_backward", [o, s, x, skip](runtime::ThreadPool* p) {
        return kernels::index_add_rows(o, s, x, skip, p);
    });
    return half ? out.to(grad.scalar_type()) : out;
}

// ---- gather -----------------------------------------------------------------------------------

at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad, at::Tensor& out) {
    const bool here = !sparse_grad && on_device(self.device(), index) && on_device(self.device(), out) &&
                      plain_dtype(self.scalar_type()) && out.scalar_type() == self.scalar_type();
    if (here && index.scalar_type() == at::kInt) return gather_out(self, dim, index.to(at::kLong), sparse_grad, out);
    if (here && index.numel() == 0) {  // the CPU checks neither the index's dtype nor its rank then
        at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
        resize_out(out, index.sizes(), {&self, &index});
        return out;
    }
    if (here && self.dim() == 0 && index.dim() <= 1 && index.scalar_type() == at::kLong) {
        // A 0-d self reads as one element, the result has the index's shape.
        at::maybe_wrap_dim(dim, 1);
        resize_out(out, index.sizes(), {&self, &index});
        at::Tensor flat = out.view({-1});
        gather_out(self.reshape({1}), 0, index.reshape({-1}), false, flat);
        return out;
    }
    bool ok = !sparse_grad && index.scalar_type() == at::kLong && index.dim() == self.dim() &&
              plain_dtype(self.scalar_type()) && out.scalar_type() == self.scalar_type() &&
              on_device(self.device(), index) && on_device(self.device(), out);
    if (ok) {
        int64_t d = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
        for (int64_t k = 0; ok && k < self.dim(); ++k) ok = k == d || index.size(k) <= self.size(k);
    }
    if (!ok) return cpu<ATEN_OP2(gather, out)>(self, dim, index, sparse_grad, out);
    dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    resize_out(out, index.sizes(), {&self, &index});
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, self);
    at::assert_no_partial_overlap(out, index);
    if (index.numel() == 0) return out;
    kernels::TensorView o = view_of(out), i = view_in(self), x = view_in(index);
    int d = static_cast<int>(dim);
    queue(out, "gather", [o, i, x, d](runtime::ThreadPool* p) { return kernels::gather(o, i, x, d, p); });
    return out;
}

at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad) {
    at::Tensor out = at::empty({0}, self.options());
    return gather_out(self, dim, index, sparse_grad, out);
}

// ---- tril / triu ------------------------------------------------------------------------------

at::Tensor& tri_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out, bool lower) {
    resize_out(out, self.sizes());
    if (self.numel() == 0) return out;
    at::Tensor src = self.contiguous();
    at::Tensor dst = out.is_contiguous() && !out.is_same(self) ? out : at::empty(self.sizes(), out.options());
    int64_t rows = self.size(-2), cols = self.size(-1);
    kernels::TensorView o = view_of(dst.view({-1, rows, cols})), i = view_in(src.view({-1, rows, cols}));
    queue(dst, lower ? "tril" : "triu", [o, i, diagonal, lower](runtime::ThreadPool* p) {
        return kernels::triangle(o, i, diagonal, lower, p);
    });
    if (!dst.is_same(out)) out.copy_(dst);
    return out;
}

#define EMBER_TRI(name, lower)                                                                          \
    at::Tensor& name##_out(const at::Tensor& self, int64_t diagonal, at::Tensor& out) {                \
        if (self.dim() < 2 || out.scalar_type() != self.scalar_type() || !plain_dtype(self.scalar_type())) \
            return cpu<ATEN_OP2(name, out)>(self, diagonal, out);                                       \
        return tri_out(self, diagonal, out, lower);                                                     \
    }                                                                                                   \
    at::Tensor name##_fn(const at::Tensor& self, int64_t diagonal) {                                    \
        if (self.dim() < 2 || !plain_dtype(self.scalar_type())) return cpu<ATEN_OP(name)>(self, diagonal); \
        at::Tensor out = at::empty({0}, self.options());                                                \
        return tri_out(self, diagonal, out, lower);                                                     \
    }                                                                                                   \
    at::Tensor& name##__fn(at::Tensor& self, int64_t diagonal) {                                        \
        if (self.dim() < 2 || !plain_dtype(self.scalar_type())) return cpu<ATEN_OP(name##_)>(self, diagonal); \
        return tri_out(self, diagonal, self, lower);                                                    \
    }

EMBER_TRI(tril, true)
EMBER_TRI(triu, false)
#undef EMBER_TRI

// ---- cumsum -----------------------------------------------------------------------------------

// Runs a scan along `dim` from self into out (and indices) of self's shape, through contiguous
// temporaries where an output is strided or overlaps self.
void run_scan(kernels::ScanOp op, const at::Tensor& self, int64_t dim, at::Tensor& out, at::Tensor* indices) {
    dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
    if (self.numel() == 0) return;
    at::Tensor src = self.contiguous();
    auto direct = [&](const at::Tensor& t) { return t.is_contiguous() && !t.is_same(self); };
    at::Tensor dst = direct(out) ? out : at::empty(self.sizes(), out.options());
    at::Tensor idx;
    if (indices != nullptr) idx = direct(*indices) ? *indices : at::empty(self.sizes(), indices->options());
    kernels::TensorView o = fold3(dst, dim), i = fold3(src, dim, false);
    kernels::TensorView x = idx.defined() ? fold3(idx, dim) : kernels::TensorView{};
    queue(dst, kernels::op_name(op), [op, o, x, i](runtime::ThreadPool* p) { return kernels::scan(op, o, x, i, p); });
    if (!dst.is_same(out)) out.copy_(dst);
    if (indices != nullptr && !idx.is_same(*indices)) indices->copy_(idx);
}

// cumsum's and cumprod's result type: the requested one, else int64 for integers and bool.
c10::ScalarType cum_dtype(const at::Tensor& self, std::optional<c10::ScalarType> dtype) {
    return dtype.value_or(at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type());
}

#define EMBER_CUM(name, kOp)                                                                        \
    at::Tensor& name##_out(const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype,  \
                           at::Tensor& out) {                                                           \
        /* a bool result the CPU refuses ("not implemented for 'Bool'") */                              \
        if (!plain_dtype(self.scalar_type()) || out.scalar_type() != cum_dtype(self, dtype) ||          \
            out.scalar_type() == at::kBool) {                                                           \
            return cpu<ATEN_OP2(name, out)>(self, dim, dtype, out);                                     \
        }                                                                                               \
        resize_out(out, self.sizes());                                                                  \
        run_scan(kOp, self, dim, out, nullptr);                                                         \
        return out;                                                                                     \
    }                                                                                                   \
    at::Tensor name(const at::Tensor& self, int64_t dim, std::optional<c10::ScalarType> dtype) {        \
        at::Tensor out = at::empty({0}, self.options().dtype(cum_dtype(self, dtype)));                  \
        return name##_out(self, dim, dtype, out);                                                       \
    }
EMBER_CUM(cumsum, kernels::ScanOp::kSum)
EMBER_CUM(cumprod, kernels::ScanOp::kProd)
#undef EMBER_CUM

// cummax/cummin's backend step: values and indices already have self's shape (cummax_out sized
// them and took the 0-dim and empty cases).
#define EMBER_CUM_EXTREME(name, kOp)                                                              \
    void name(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {     \
        if (!plain_dtype(self.scalar_type()) || values.scalar_type() != self.scalar_type()) {     \
            return cpu<ATEN_OP(name)>(self, values, indices, dim);                                \
        }                                                                                         \
        run_scan(kOp, self, dim, values, &indices);                                               \
    }
EMBER_CUM_EXTREME(_cummax_helper, kernels::ScanOp::kMax)
EMBER_CUM_EXTREME(_cummin_helper, kernels::ScanOp::kMin)
#undef EMBER_CUM_EXTREME

bool float_dtype(c10::ScalarType t) { return at::isFloatingType(t) && has_dtype(t); }

at::Tensor& logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
    if (!float_dtype(self.scalar_type()) || out.scalar_type() != self.scalar_type()) {
        return cpu<ATEN_OP2(_logcumsumexp, out)>(self, dim, out);
    }
    resize_out(out, self.sizes());
    run_scan(kernels::ScanOp::kLogSumExp, self, dim, out, nullptr);
    return out;
}

at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
    if (!float_dtype(self.scalar_type())) return cpu<ATEN_OP(_logcumsumexp)>(self, dim);
    at::Tensor out = at::empty({0}, self.options());
    return logcumsumexp_out(self, dim, out);
}

// ---- histc ------------------------------------------------------------------------------------

// torch.histc as CUDA computes it, integer inputs included (the CPU refuses those; libraries
// that see an accelerator pass them: transformers' MoE token counts). With min == max the range
// is the data's own, which is read back to the host (a synchronizing call, as on CUDA).
at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max,
                      at::Tensor& out) {
    TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
    const auto t = self.scalar_type();
    if (!plain_dtype(t) || t == at::kBool || t == at::kHalf || t == at::kBFloat16 || out.scalar_type() != t)
        return cpu<ATEN_OP2(histc, out)>(self, bins, min, max, out);
    double lo = min.toDouble(), hi = max.toDouble();
    if (lo == hi && self.numel() > 0) {  // the range of the values (NaN in them: refused below)
        lo = at::amin(self).item<double>();
        hi = at::amax(self).item<double>();
    }
    if (lo == hi) {
        lo -= 1;
        hi += 1;
    }
    TORCH_CHECK(!(std::isinf(lo) || std::isinf(hi) || std::isnan(lo) || std::isnan(hi)),
                "torch.histc: range of [", lo, ", ", hi, "] is not finite");
    TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
    resize_out(out, {bins}, {&self});
    at::Tensor src = self.contiguous();
    at::Tensor dst = out.is_contiguous() ? out : at::empty({bins}, out.options());
    kernels::TensorView o = view_of(dst), i = view_in(src.reshape({-1}));
    queue(dst, "histc", [o, i, bins, lo, hi](runtime::ThreadPool* p) { return kernels::histc(o, i, bins, lo, hi, p); });
    if (!dst.is_same(out)) out.copy_(dst);
    return out;
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const c10::Scalar& min, const c10::Scalar& max) {
    at::Tensor out = at::empty({0}, self.options());
    return histc_out(self, bins, min, max, out);
}

// ---- bincount -----------------------------------------------------------------------------------

// Counts (or summed weights) per non-negative integer value, as an index_add into zeros. The
// output length depends on the largest value, which is read back to the host (synchronizing, as
// on CUDA); MoE routers call this on every step to count tokens per expert.
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
    TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
    // The CPU kernel's dispatch refuses a non-integer dtype before it checks the shape.
    TORCH_CHECK_NOT_IMPLEMENTED(at::isIntegralType(self.scalar_type(), false), "\"bincount\" not implemented for '",
                                c10::toString(self.scalar_type()), "'");
    TORCH_CHECK(self.dim() == 1, "bincount only supports 1-d non-negative integral inputs.");
    const bool weighted = weights.has_value() && weights->defined();
    TORCH_CHECK(!weighted || (weights->dim() == 1 && weights->size(0) == self.size(0)),
                "weights should be 1-d and have the same length as input");
    int64_t n = minlength;
    if (self.numel() > 0) {
        TORCH_CHECK(at::amin(self).item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
        n = std::max(n, at::amax(self).item<int64_t>() + 1);
    }
    // Float weights keep their dtype (float32 / float64); any other weights sum in float64.
    const c10::ScalarType rt = !weighted ? at::kLong
                               : (weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble);
    at::Tensor out = at::zeros({n}, self.options().dtype(rt));
    if (self.numel() == 0) return out;
    at::Tensor src = weighted ? weights->to(rt) : at::ones({self.size(0)}, out.options());
    return out.index_add_(0, self.to(at::kLong), src);
}

// ---- eye ----------------------------------------------------------------------------------------

at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
    TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
    TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
    if (!plain_dtype(out.scalar_type())) return cpu<ATEN_OP2(eye, m_out)>(n, m, out);
    resize_out(out, {n, m});
    out.zero_();
    if (n > 0 && m > 0) out.diagonal().fill_(1);
    return out;
}

at::Tensor& eye_out(int64_t n, at::Tensor& out) { return eye_m_out(n, n, out); }

// ---- arange -----------------------------------------------------------------------------------

at::Tensor& arange_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step, at::Tensor& out) {
    if (!plain_dtype(out.scalar_type()) || out.scalar_type() == at::kBool) {
        return cpu<ATEN_OP2(arange, start_out)>(start, end, step, out);
    }
    // PyTorch's size rule and checks, from the CPU implementation's arithmetic.
    double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
    TORCH_CHECK(st != 0, "step must be nonzero");
    TORCH_CHECK(std::isfinite(s) && std::isfinite(e), "unsupported range: ", s, " -> ", e);
    TORCH_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "upper bound and larger bound inconsistent with step sign");
    int64_t size;
    if (out.scalar_type() == at::kLong) {
        // CPU computes an int64 range's length from the bounds cast to int64.
        int64_t a = start.to<int64_t>(), b = end.to<int64_t>(), c = step.to<int64_t>();
        TORCH_CHECK(c != 0, "step must be nonzero");
        int64_t sgn = (c > 0) - (c < 0);
        size = (b - a + c - sgn) / c;
    } else {
        size = static_cast<int64_t>(std::ceil((e - s) / st));
    }
    if (out.numel() != size) {
        if (out.numel() > 0) {
            TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
                       " which does not match the computed number of elements ", size,
                       ". Note that this may occur as a result of rounding error. "
                       "The out tensor will be resized to a tensor of shape (", size, ",).");
        }
        out.resize_({size});
    }
    if (size == 0) return out;
    kernels::Scalar ks, kst;
    if (start.isFloatingPoint()) { ks.kind = kernels::Scalar::Kind::kFloat; ks.f = s; } else { ks.kind = kernels::Scalar::Kind::kInt; ks.i = start.toLong(); }
    if (step.isFloatingPoint()) { kst.kind = kernels::Scalar::Kind::kFloat; kst.f = st; } else { kst.kind = kernels::Scalar::Kind::kInt; kst.i = step.toLong(); }
    // An out= of another shape with `size` elements keeps its shape and is filled in row-major
    // order, as on the CPU.
    const bool direct = out.is_contiguous();
    at::Tensor dst = direct ? out.view({size}) : at::empty({size}, out.options());
    kernels::TensorView o = view_of(dst);
    queue(dst, "arange", [o, ks, kst](runtime::ThreadPool* p) { return kernels::arange(o, ks, kst, p); });
    if (!direct) out.copy_(dst.view(out.sizes()));
    return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("eye.out", eye_out);
    m.impl("eye.m_out", eye_m_out);
    m.impl("bincount", bincount);
    m.impl("histc", histc);
    m.impl("histc.out", histc_out);
    m.impl("cat", cat);
    m.impl("cat.out", cat_out);
    m.impl("index_select", index_select);
    m.impl("index_select.out", index_select_out);
    m.impl("embedding_dense_backward", embedding_dense_backward);
    m.impl("gather", gather);
    m.impl("gather.out", gather_out);
    m.impl("tril", tril_fn);
    m.impl("tril.out", tril_out);
    m.impl("tril_", tril__fn);
    m.impl("triu", triu_fn);
    m.impl("triu.out", triu_out);
    m.impl("triu_", triu__fn);
    m.impl("cumsum", cumsum);
    m.impl("cumsum.out", cumsum_out);
    m.impl("cumprod", cumprod);
    m.impl("cumprod.out", cumprod_out);
    m.impl("_cummax_helper", _cummax_helper);
    m.impl("_cummin_helper", _cummin_helper);
    m.impl("_logcumsumexp", logcumsumexp);
    m.impl("_logcumsumexp.out", logcumsumexp_out);
    m.impl("arange.start_out", arange_out);
}

}  // namespace ember::torch_glue
