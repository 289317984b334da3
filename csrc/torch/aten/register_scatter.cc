// Writing by index and selecting by mask: scatter/scatter_add/scatter_reduce, index_put_
// (what `x[idx] = v` and `x[mask] = v` run), index_add, advanced indexing reads (`x[idx]`,
// `x[mask]`), masked_select and nonzero, on kernels/index. Index forms beyond one index tensor
// (several advanced indices, non-leading masks) take the CPU fallback.
//
// nonzero and masked_select have data-dependent sizes: they count on the device, then wait for
// that count as CUDA does, which makes them synchronizing calls.
#include <algorithm>
#include <limits>

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ScatterGatherChecks.h>
#include <torch/library.h>

#include <memory>

#include "kernels/index/scatter.h"
#include "kernels/index/select_mask.h"
#include "complex_parts.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

using kernels::ScatterReduce;

// ---- scatter family -------------------------------------------------------------------------

// out = self (unless they are the same tensor), then scatter src (a tensor, or a scalar held in
// a 0-d device tensor) into it along dim.
at::Tensor& scatter_impl(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                         ScatterReduce reduce, at::Tensor& out) {
    dim = at::maybe_wrap_dim(dim, self.dim());
    at::native::scatter_gather_dtype_check("scatter", self, index, src.dim() == 0 ? std::nullopt : std::optional(src));
    at::native::scatter_shape_check(self, dim, index, src.dim() == 0 ? std::nullopt : std::optional(src));
    if (!out.is_same(self)) {
        resize_out(out, self.sizes());
        out.copy_(self);
    }
    if (index.numel() == 0) return out;
    at::Tensor idx = index.scalar_type() == at::kLong ? index : index.to(at::kLong);
    at::Tensor s = src.dim() == 0 && index.dim() > 0 ? src.expand(index.sizes()) : src;
    at::Tensor dst = out.is_contiguous() ? out : at::empty(out.sizes(), out.options().memory_format(at::MemoryFormat::Contiguous)).copy_(out);
    // PyTorch treats a 0-d tensor here as 1-d of size 1; so does the kernel's view of it.
    auto rank1 = [](const at::Tensor& t) { return t.dim() == 0 ? t.view({1}) : t; };
    kernels::TensorView o = view_of(rank1(dst)), i = view_in(rank1(idx)), v = view_in(rank1(s));
    int d = static_cast<int>(dim);
    queue(dst, "scatter", [o, i, v, d, reduce](runtime::ThreadPool* p) { return kernels::scatter(o, i, v, d, reduce, p); });
    if (!dst.is_same(out)) out.copy_(dst);
    return out;
}

bool native_scatter(const at::Tensor& self, const at::Tensor& index, const at::Tensor* src, const at::Tensor& out) {
    return plain_dtype(self.scalar_type()) && out.scalar_type() == self.scalar_type() &&
           (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt) && on_device(self.device(), index) &&
           on_device(self.device(), out) && (!src || on_device(self.device(), *src));
}

at::Tensor scalar_on_device(const c10::Scalar& value, const at::Tensor& like) {
    return at::full({}, value, like.options());
}

std::optional<ScatterReduce> reduce_of(c10::string_view reduce, bool two) {
    if (reduce == "add" || (two && reduce == "sum")) return ScatterReduce::kSum;
    if (reduce == "multiply" || (two && reduce == "prod")) return ScatterReduce::kProd;
    if (two && reduce == "amax") return ScatterReduce::kAmax;
    if (two && reduce == "amin") return ScatterReduce::kAmin;
    return std::nullopt;  // mean, or a name PyTorch rejects: the fallback answers
}

at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
    if (!native_scatter(self, index, &src, out)) return cpu<ATEN_OP2(scatter, src_out)>(self, dim, index, src, out);
    return scatter_impl(self, dim, index, src, ScatterReduce::kAssign, out);
}

at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const c10::Scalar& value,
                              at::Tensor& out) {
    if (!native_scatter(self, index, nullptr, out)) return cpu<ATEN_OP2(scatter, value_out)>(self, dim, index, value, out);
    return scatter_impl(self, dim, index, scalar_on_device(value, self), ScatterReduce::kAssign, out);
}

at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                               c10::string_view reduce, at::Tensor& out) {
    auto r = reduce_of(reduce, false);
    if (!r || !native_scatter(self, index, &src, out))
        return cpu<ATEN_OP2(scatter, reduce_out)>(self, dim, index, src, reduce, out);
    return scatter_impl(self, dim, index, src, *r, out);
}

at::Tensor& scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const c10::Scalar& value, c10::string_view reduce, at::Tensor& out) {
    auto r = reduce_of(reduce, false);
    if (!r || !native_scatter(self, index, nullptr, out))
        return cpu<ATEN_OP2(scatter, value_reduce_out)>(self, dim, index, value, reduce, out);
    return scatter_impl(self, dim, index, scalar_on_device(value, self), *r, out);
}

at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out) {
    if (!native_scatter(self, index, &src, out)) return cpu<ATEN_OP2(scatter_add, out)>(self, dim, index, src, out);
    return scatter_impl(self, dim, index, src, ScatterReduce::kSum, out);
}

// The largest (or smallest) value of an integer dtype.
c10::Scalar integer_extreme(c10::ScalarType t, bool largest) {
    c10::Scalar out;
    AT_DISPATCH_INTEGRAL_TYPES(t, "integer_extreme", [&] {
        out = largest ? std::numeric_limits<scalar_t>::max() : std::numeric_limits<scalar_t>::lowest();
    });
    return out;
}

// include_self=false: the positions that receive values start from the reduction's identity, so
// the self values there take no part (CPU's rule). "mean" divides the received sum (plus self when
// included) by the number of values, rounding integers down; positions that receive none keep
// self. A bool mean is refused by the CPU's own kernel.

at::Tensor& scatter_reduce_two_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                                   c10::string_view reduce, bool include_self, at::Tensor& out) {
    auto r = reduce_of(reduce, true);
    const bool mean = reduce == "mean", floating = at::isFloatingType(self.scalar_type());
    const bool extreme = r && (*r == ScatterReduce::kAmax || *r == ScatterReduce::kAmin);
    const bool is_bool = self.scalar_type() == at::kBool;
    if ((!r && !mean) || (mean && is_bool) || !native_scatter(self, index, &src, out))
        return cpu<ATEN_OP2(scatter_reduce, two_out)>(self, dim, index, src, reduce, include_self, out);
    if (mean) {
        // Integer means round down, as on the CPU.
        at::Tensor sum = (include_self ? self.clone() : at::zeros_like(self)).scatter_add_(dim, index, src);
        at::Tensor count = (include_self ? at::ones_like(self) : at::zeros_like(self))
                               .scatter_add_(dim, index, at::ones_like(src));
        at::Tensor divisor = count.clamp_min(1);
        at::Tensor result = floating ? sum.div(divisor) : sum.div(divisor, "floor");
        if (!include_self) result = at::where(count.gt(0), result, self);
        resize_out(out, self.sizes(), {&index, &src});
        return out.copy_(result);
    }
    if (include_self) return scatter_impl(self, dim, index, src, *r, out);
    // Each target starts from the reduction's identity (the dtype's extremes for amax/amin).
    const bool max = *r == ScatterReduce::kAmax;
    const c10::Scalar identity = *r == ScatterReduce::kSum    ? c10::Scalar(0)
                                 : *r == ScatterReduce::kProd ? c10::Scalar(1)
                                 : is_bool                    ? c10::Scalar(!max)
                                 : floating ? c10::Scalar(max ? -std::numeric_limits<double>::infinity()
                                                              : std::numeric_limits<double>::infinity())
                                 : integer_extreme(self.scalar_type(), !max);
    return scatter_impl(self.scatter(dim, index, identity), dim, index, src, *r, out);
}

// index_reduce is scatter_reduce with the index spread along source's other dims: every source
// slice i along dim reduces into self's slice index[i]. Shapes and dtypes the CPU would refuse
// take its path, so its errors apply.
at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                             c10::string_view reduce, bool include_self, at::Tensor& out) {
    TORCH_WARN_ONCE("index_reduce() is in beta and the API may change at any time.");
    if (self.dim() == 0 && source.dim() == 0 && index.numel() == 1 && (dim == 0 || dim == -1)) {
        // A 0-d self is a one-element row (the kernel checks that the index is 0).
        at::Tensor one = at::empty({1}, out.options());
        index_reduce_out(self.reshape({1}), 0, index.reshape({1}), source.reshape({1}), reduce, include_self, one);
        resize_out(out, c10::IntArrayRef());
        return out.copy_(one.squeeze(0));
    }
    bool ok = self.dim() > 0 && source.dim() == self.dim() && index.dim() <= 1 && index.scalar_type() == at::kLong &&
              source.scalar_type() == self.scalar_type() && self.scalar_type() != at::kBool &&
              (reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin") &&
              native_scatter(self, index, &source, out);
    if (ok) {
        dim = at::maybe_wrap_dim(dim, self.dim());
        ok = source.size(dim) == index.numel();
        for (int64_t d = 0; ok && d < self.dim(); ++d) ok = d == dim || source.size(d) == self.size(d);
    }
    if (!ok) return cpu<ATEN_OP2(index_reduce, out)>(self, dim, index, source, reduce, include_self, out);
    std::vector<int64_t> along(self.dim(), 1);
    along[dim] = index.numel();
    at::Tensor spread = index.reshape(along).expand(source.sizes()).contiguous();
    return scatter_reduce_two_out(self, dim, spread, source, reduce, include_self, out);
}

// ---- counting: nonzero and masked_select ----------------------------------------------------

// Counts the nonzero elements of `t` on its stream and waits for the answer.
int64_t device_count_nonzero(const at::Tensor& t) {
    auto result = std::make_shared<int64_t>(0);
    kernels::TensorView v = view_in(t);
    queue(t, "count_nonzero", [v, result](runtime::ThreadPool* p) {
        auto n = kernels::count_nonzero(v, p);
        if (!n.ok()) return n.status();
        *result = *n;
        return Status();
    });
    synchronize(current_stream_of(t));
    return *result;
}

at::Tensor nonzero_fn(const at::Tensor& self) {
    if (!has_dtype(self.scalar_type()) || self.dim() > kernels::kMaxDims) return cpu<ATEN_OP(nonzero)>(self);
    const int64_t count = device_count_nonzero(self);
    at::Tensor out = at::empty({count, self.dim()}, self.options().dtype(at::kLong));
    if (count == 0 || self.dim() == 0) return out;
    kernels::TensorView o = view_of(out), i = view_in(self);
    queue(out, "nonzero", [o, i](runtime::ThreadPool* p) { return kernels::nonzero(o, i, p); });
    return out;
}

at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask) {
    if (!plain_dtype(self.scalar_type()) || mask.scalar_type() != at::kBool || !on_device(self.device(), mask))
        return cpu<ATEN_OP(masked_select)>(self, mask);
    auto [s, m] = at::expand_outplace(self, mask);
    const int64_t count = device_count_nonzero(*m);
    at::Tensor out = at::empty({count}, self.options());
    if (count == 0) return out;
    kernels::TensorView o = view_of(out), i = view_in(*s), k = view_in(*m);
    queue(out, "masked_select", [o, i, k](runtime::ThreadPool* p) { return kernels::masked_select(o, i, k, p); });
    return out;
}

// ---- advanced indexing: one index tensor, or several over consecutive dims ---------------------

// The one advanced index of `indices` and its dimension, as a 1-d int64 position list over
// `flat` (self with the indexed dims merged). Returns false for forms handled by the fallback.
struct OneIndex {
    int64_t dim = 0;
    at::Tensor positions;               // 1-d int64, may hold negatives (they wrap)
    std::vector<int64_t> result_shape;  // shape of self[indices]
    at::Tensor flat;                    // self viewed with the indexed dims merged into `dim`
};

// Several integer index tensors over consecutive dims (x[rows, cols]) select like one index over
// those dims merged: the position is the row-major offset of the (wrapped) indices. Each index
// is checked against its own dim on the device (an out-of-range one would otherwise land in a
// neighbouring row), and the failure surfaces at the next synchronizing call, as on CUDA.
bool consecutive_indices(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                         std::vector<int64_t>& dims, OneIndex& r) {
    const int64_t first = dims.front(), m = static_cast<int64_t>(dims.size());
    if (dims.back() - first + 1 != m || first + m > self.dim()) return false;
    std::vector<at::Tensor> idx;
    for (int64_t d : dims) {
        const at::Tensor t = *indices.get(d);
        if ((t.scalar_type() != at::kLong && t.scalar_type() != at::kInt) || !on_device(self.device(), t)) return false;
        idx.push_back(t.to(at::kLong));
    }
    // Index shapes that do not broadcast: the CPU raises its IndexError ("shape mismatch").
    std::vector<int64_t> shape;
    for (const at::Tensor& t : idx) {
        const auto s = t.sizes();
        if (s.size() > shape.size()) shape.insert(shape.begin(), s.size() - shape.size(), 1);
        for (size_t k = 0; k < s.size(); ++k) {
            int64_t& have = shape[shape.size() - s.size() + k];
            if (have != s[k] && have != 1 && s[k] != 1) return false;
            if (have == 1) have = s[k];
        }
    }
    const auto sizes = self.sizes();
    at::Tensor lin;
    int64_t stride = 1;
    for (int64_t j = m - 1; j >= 0; --j) {
        const int64_t n = sizes[first + j];
        at::Tensor i = idx[static_cast<size_t>(j)];
        at::_assert_async(at::logical_not(at::logical_or(i.lt(-n), i.ge(n)).any()),
                          "index out of bounds: an index is outside its dimension");
        at::Tensor w = at::where(i.lt(0), i.add(n), i);
        at::Tensor term = stride == 1 ? w : w.mul(stride);
        lin = lin.defined() ? term.add(lin) : term;
        stride *= n;
    }
    std::vector<int64_t> bshape(lin.sizes().begin(), lin.sizes().end());
    r.positions = lin.reshape({-1}).contiguous();
    std::vector<int64_t> flat_shape(sizes.begin(), sizes.begin() + first);
    flat_shape.push_back(stride);
    flat_shape.insert(flat_shape.end(), sizes.begin() + first + m, sizes.end());
    r.flat = self.view(flat_shape);
    r.result_shape = std::vector<int64_t>(sizes.begin(), sizes.begin() + first);
    r.result_shape.insert(r.result_shape.end(), bshape.begin(), bshape.end());
    r.result_shape.insert(r.result_shape.end(), sizes.begin() + first + m, sizes.end());
    r.dim = first;
    return true;
}

bool one_index(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices, OneIndex& r) {
    std::vector<int64_t> defined;
    for (size_t k = 0; k < indices.size(); ++k) {
        const std::optional<at::Tensor> t = indices.get(k);
        if (t.has_value() && t->defined()) defined.push_back(static_cast<int64_t>(k));
    }
    if (defined.empty() || !self.is_contiguous() || self.dim() == 0) return false;
    if (defined.size() > 1) return consecutive_indices(self, indices, defined, r);
    const int64_t found = defined.front();
    const at::Tensor idx = *indices.get(found);
    if (!on_device(self.device(), idx)) return false;
    const auto sizes = self.sizes();
    if (idx.scalar_type() == at::kBool) {
        // A mask over dims [found, found + idx.dim()) selects positions in their merged dim.
        const int64_t k = idx.dim();
        if (k == 0 || found + k > self.dim()) return false;
        for (int64_t d = 0; d < k; ++d) if (idx.size(d) != sizes[found + d]) return false;
        r.positions = nonzero_fn(idx.reshape({-1})).view({-1});
        std::vector<int64_t> flat_shape(sizes.begin(), sizes.begin() + found);
        flat_shape.push_back(-1);
        flat_shape.insert(flat_shape.end(), sizes.begin() + found + k, sizes.end());
        r.flat = self.view(flat_shape);
        r.result_shape = std::vector<int64_t>(sizes.begin(), sizes.begin() + found);
        r.result_shape.push_back(r.positions.size(0));
        r.result_shape.insert(r.result_shape.end(), sizes.begin() + found + k, sizes.end());
    } else if (idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt) {
        r.positions = idx.reshape({-1}).to(at::kLong);
        r.flat = self;
        r.result_shape = std::vector<int64_t>(sizes.begin(), sizes.begin() + found);
        r.result_shape.insert(r.result_shape.end(), idx.sizes().begin(), idx.sizes().end());
        r.result_shape.insert(r.result_shape.end(), sizes.begin() + found + 1, sizes.end());
    } else {
        return false;
    }
    r.dim = found;
    return true;
}

using IndexList = c10::List<std::optional<at::Tensor>>;

// Two rewrites that bring more indexing forms to the kernels above. Index tensors on the CPU
// (which CUDA accepts too) are moved to self's device. Integer indices separated by a slice
// (x[i, :, j]) put their broadcast dims first in the result, as PyTorch does: that is indexing
// self with the indexed dims moved to the front, where the indices are consecutive. Returns self,
// or that permuted view of it; `moved` gets the indices to use with it, `changed` whether any
// rewrite applied.
// An integer index still in host memory (x[[3, 10]], x[torch.tensor(...)]) is checked there,
// raising the CPU's IndexError at the call; checked on the device it would surface at the next
// synchronizing call, as CUDA's does.
void check_host_index(const at::Tensor& index, const at::Tensor& self, int64_t dim) {
    if (!(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt) || dim >= self.dim() ||
        index.numel() == 0)
        return;
    const int64_t size = self.size(dim);
    const at::Tensor flat = index.reshape(-1).to(at::kLong).contiguous();
    const int64_t* v = flat.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < flat.numel(); ++i)
        TORCH_CHECK_INDEX(v[i] < size && v[i] >= -size, "index ", v[i], " is out of bounds for dimension ", dim,
                          " with size ", size);
}

at::Tensor canonical_indexing(const at::Tensor& self, const IndexList& indices, IndexList& moved,
                              bool& changed) {
    changed = false;
    std::vector<int64_t> defined;
    bool integer = true;
    std::vector<std::optional<at::Tensor>> all;
    for (size_t k = 0; k < indices.size(); ++k) {
        std::optional<at::Tensor> t = indices.get(k);
        if (t.has_value() && t->defined()) {
            if (t->device().is_cpu() && !self.device().is_cpu()) {
                check_host_index(*t, self, static_cast<int64_t>(k));
                t = t->to(self.device());
                changed = true;
            }
            integer = integer && (t->scalar_type() == at::kLong || t->scalar_type() == at::kInt);
            defined.push_back(static_cast<int64_t>(k));
        }
        all.push_back(t);
    }
    moved = IndexList();
    const bool consecutive = defined.empty() || defined.back() - defined.front() + 1 == static_cast<int64_t>(defined.size());
    if (consecutive || !integer || static_cast<int64_t>(indices.size()) > self.dim()) {
        for (auto& t : all) moved.push_back(t);
        return self;
    }
    std::vector<int64_t> order(defined);
    for (int64_t d = 0; d < self.dim(); ++d)
        if (std::find(defined.begin(), defined.end(), d) == defined.end()) order.push_back(d);
    for (int64_t d : defined) moved.push_back(all[static_cast<size_t>(d)]);
    changed = true;
    return self.permute(order);
}

// A uint8 index reads as a mask (PyTorch's deprecated spelling, warned about before dispatch),
// selecting where it is nonzero. Writes keep the CPU's path, which refuses some uint8 forms.
IndexList bool_masks(const IndexList& indices) {
    IndexList out;
    for (size_t k = 0; k < indices.size(); ++k) {
        std::optional<at::Tensor> t = indices.get(k);
        if (t.has_value() && t->defined() && t->scalar_type() == at::kByte) t = t->ne(0);
        out.push_back(t);
    }
    return out;
}

// A bool mask among other indices (x[mask, idx], the box losses of detection models) is the
// int64 indices of its true positions, one per dim it covers, as PyTorch expands it; the result
// then takes the integer paths above. nullopt: no such mask (or a form left to the fallback,
// whose checks word the errors).
std::optional<IndexList> masks_as_indices(const at::Tensor& self, const IndexList& indices) {
    int64_t defined = 0;
    bool mask = false;
    for (size_t k = 0; k < indices.size(); ++k) {
        const std::optional<at::Tensor> t = indices.get(k);
        if (!t.has_value() || !t->defined()) continue;
        ++defined;
        mask = mask || t->scalar_type() == at::kBool;
    }
    if (!mask || defined < 2) return std::nullopt;
    IndexList out;
    int64_t dim = 0;
    for (size_t k = 0; k < indices.size(); ++k) {
        const std::optional<at::Tensor> t = indices.get(k);
        if (!t.has_value() || !t->defined() || t->scalar_type() != at::kBool) {
            out.push_back(t);
            ++dim;
            continue;
        }
        if (t->dim() == 0 || dim + t->dim() > self.dim()) return std::nullopt;
        for (int64_t d = 0; d < t->dim(); ++d)
            if (t->size(d) != self.size(dim + d)) return std::nullopt;
        const at::Tensor nz = at::nonzero(t->to(self.device()));  // [count, t->dim()]
        for (int64_t d = 0; d < t->dim(); ++d) out.push_back(std::optional<at::Tensor>(nz.select(1, d)));
        dim += t->dim();
    }
    return out;
}

at::Tensor& index_out(const at::Tensor& self_in, const IndexList& indices_in, at::Tensor& out) {
    // Complex values: the same indices pick (re, im) pairs of the real view, whose extra last
    // dim no index touches.
    if (complex_on_device(self_in) && !self_in.is_conj() && out.scalar_type() == self_in.scalar_type() &&
        out.is_privateuseone())
        return write_out(out, at::view_as_complex(at::index(at::view_as_real(self_in), indices_in).contiguous()));
    OneIndex r;
    IndexList indices;
    bool changed = false;
    const IndexList masks = bool_masks(indices_in);
    const std::optional<IndexList> expanded = masks_as_indices(self_in, masks);
    const at::Tensor base = canonical_indexing(self_in, expanded ? *expanded : masks, indices, changed);
    // A strided self (a transposed or sliced view) is read through a contiguous copy.
    const at::Tensor self = base.is_contiguous() ? base : base.contiguous();
    if (!plain_dtype(self.scalar_type()) || out.scalar_type() != self.scalar_type() || !one_index(self, indices, r))
        return cpu<ATEN_OP2(index, Tensor_out)>(self_in, indices_in, out);
    const int64_t n = r.flat.size(r.dim);
    // Negative positions count from the end; out-of-range ones are caught by index_select.
    at::Tensor pos = at::where(r.positions.lt(0), r.positions.add(n), r.positions);
    at::Tensor picked = at::index_select(r.flat, r.dim, pos);
    resize_out(out, r.result_shape);
    return out.copy_(picked.view(r.result_shape));
}

// No two indices of `t` address the same element: with dims sorted by stride, each stride
// steps past everything the smaller ones span (slices and permutations pass; expanded or
// self-overlapping as_strided views do not).
bool distinct_elements(const at::Tensor& t) {
    std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
    for (int64_t d = 0; d < t.dim(); ++d)
        if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
    std::sort(dims.begin(), dims.end());
    int64_t span = 1;
    for (const auto& [stride, size] : dims) {
        if (stride < span) return false;
        span = stride * size;
    }
    return true;
}

// self[indices] (=|+=) values, in place, for one index tensor over a contiguous self.
at::Tensor& index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                            const at::Tensor& values, bool accumulate, bool unsafe) {
    auto fallback = [&]() -> at::Tensor& { return cpu<ATEN_OP(_index_put_impl_)>(self, indices, values, accumulate, unsafe); };
    // Complex values: (re, im) pairs put through the real views, whose extra last dim no index touches.
    if (complex_on_device(self) && !self.is_conj() && values.scalar_type() == self.scalar_type() &&
        on_device(self.device(), values)) {
        at::Tensor real_self = at::view_as_real(self);
        at::_index_put_impl_(real_self, indices, at::view_as_real(values.resolve_conj()), accumulate, unsafe);
        return self;
    }
    if (values.dim() == 0 && values.device().is_cpu() && !self.device().is_cpu()) {
        // A 0-dim CPU value (x[mask] = torch.tensor(0.5)), which CUDA accepts too: moved to the
        // device as a fill, without waiting for it. With one boolean mask the CPU takes its
        // masked_fill path, which casts v to x's dtype; otherwise the dtypes must match.
        const bool one_mask = !accumulate && indices.size() == 1 && indices.get(0).has_value() &&
                              (indices.get(0)->scalar_type() == at::kBool || indices.get(0)->scalar_type() == at::kByte);
        const auto dtype = one_mask ? self.scalar_type() : values.scalar_type();
        at::Tensor value = at::full({}, values.item(), values.options().dtype(dtype).device(self.device()));
        return index_put_impl_(self, indices, value, accumulate, unsafe);
    }
    if (!plain_dtype(self.scalar_type()) || values.scalar_type() != self.scalar_type() ||
        !on_device(self.device(), values)) {
        return fallback();
    }
    for (size_t k = 0; k < indices.size(); ++k) {
        const std::optional<at::Tensor> t = indices.get(k);
        if (t.has_value() && t->defined() && t->scalar_type() == at::kByte) {
            // A uint8 mask (deprecated, with the CPU kernel's warning) is the bool mask of its
            // nonzeros.
            TORCH_WARN("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool instead.");
            index_put_impl_(self, bool_masks(indices), values, accumulate, unsafe);
            return self;
        }
    }
    if (const std::optional<IndexList> expanded = masks_as_indices(self, indices)) {
        index_put_impl_(self, *expanded, values, accumulate, unsafe);
        return self;
    }
    if (accumulate && half_float(self.scalar_type())) {
        // Repeated indices (x[idx]'s gradient) summed in float and rounded once, as CUDA's
        // sorted accumulation does: summed in bfloat16, an element stops growing at 256 ones.
        at::Tensor wide = self.to(at::kFloat);
        index_put_impl_(wide, indices, values.to(at::kFloat), accumulate, unsafe);
        self.copy_(wide);
        return self;
    }
    IndexList moved;
    bool changed = false;
    at::Tensor canonical = canonical_indexing(self, indices, moved, changed);
    if (changed) {
        // Indices moved to the device, or self permuted to put separated indices first: the
        // same put on that form (a permuted view writes through to self).
        index_put_impl_(canonical, moved, values, accumulate, unsafe);
        return self;
    }
    // x[mask] = scalar over the whole shape is masked_fill, with no count to wait for.
    if (!accumulate && indices.size() == 1 && values.numel() == 1 && values.dim() == 0) {
        const std::optional<at::Tensor> m = indices.get(0);
        if (m && m->defined() && m->scalar_type() == at::kBool && m->sizes() == self.sizes() && on_device(self.device(), *m))
            return self.masked_fill_(*m, values);
    }
    if (!self.is_contiguous() && self.dim() > 0 && distinct_elements(self)) {
        // A strided self (x.t()[i] = v) is updated through a contiguous copy written back after.
        OneIndex probe;
        at::Tensor dense = self.contiguous();
        if (!one_index(dense, indices, probe)) return fallback();
        index_put_impl_(dense, indices, values, accumulate, unsafe);
        self.copy_(dense);
        return self;
    }
    OneIndex r;
    if (!one_index(self, indices, r)) return fallback();
    std::vector<int64_t> target(r.flat.sizes().begin(), r.flat.sizes().end());
    target[r.dim] = r.positions.size(0);
    if (!at::is_expandable_to(values.sizes(), r.result_shape)) return fallback();  // CPU words the error
    if (r.positions.size(0) == 0) return self;
    at::Tensor vals = values.expand(r.result_shape).reshape(target).contiguous();
    kernels::TensorView o = fold3(r.flat, r.dim), i = view_in(r.positions), v = fold3(vals, r.dim, false);
    queue(self, "index_put_", [o, i, v, accumulate](runtime::ThreadPool* p) {
        return kernels::index_put_rows(o, i, v, accumulate, p);
    });
    return self;
}

// index_add's and index_copy's shape rule: source matches self except along dim (wrapped here),
// where it has a row per index.
bool rows_fit(const at::Tensor& self, int64_t& dim, const at::Tensor& index, const at::Tensor& source) {
    if (self.dim() == 0) return false;
    dim = at::maybe_wrap_dim(dim, self.dim());
    if (source.size(dim) != index.numel()) return false;
    for (int64_t d = 0; d < self.dim(); ++d)
        if (d != dim && source.size(d) != self.size(d)) return false;
    return true;
}

at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          const c10::Scalar& alpha, at::Tensor& out) {
    bool ok = plain_dtype(self.scalar_type()) && source.scalar_type() == self.scalar_type() &&
              out.scalar_type() == self.scalar_type() && index.dim() <= 1 &&
              (index.scalar_type() == at::kLong || index.scalar_type() == at::kInt) &&
              source.dim() == self.dim() && on_device(self.device(), index) && on_device(self.device(), source) &&
              // alpha * source must keep self's dtype (bool times 2 is an integer on the CPU); a bool
              // alpha with bool tensors ORs the rows in (True) or adds nothing (False).
              (self.scalar_type() == at::kBool ? alpha.isBoolean()
                                               : at::isFloatingType(self.scalar_type()) || !alpha.isFloatingPoint());
    if (ok && self.dim() == 0 && index.numel() == 1 && (dim == 0 || dim == -1)) {
        // A 0-d self adds its one source element at index 0 (the kernel checks the index).
        if (!out.is_same(self)) {
            resize_out(out, {});
            out.copy_(self);
        }
        at::Tensor flat = out.view({1});
        index_add_out(flat, 0, index, source.reshape({1}), alpha, flat);
        return out;
    }
    ok = ok && rows_fit(self, dim, index, source);
    if (!ok) return cpu<ATEN_OP2(index_add, out)>(self, dim, index, source, alpha, out);
    if (!out.is_same(self)) {
        resize_out(out, self.sizes());
        out.copy_(self);
    }
    if (index.numel() == 0) return out;
    at::Tensor dst = out.is_contiguous() ? out : out.contiguous();
    const bool is_bool = self.scalar_type() == at::kBool;
    const bool unit = is_bool ? alpha.toBool() : !alpha.isBoolean() && alpha.equal(1);
    at::Tensor src = (unit ? source : is_bool ? at::zeros_like(source) : source.mul(alpha)).contiguous();
    at::Tensor idx = index.reshape({-1}).to(at::kLong);
    kernels::TensorView o = fold3(dst, dim), i = view_in(idx), v = fold3(src, dim, false);
    // The CPU sums rows (a self of two or more dims, alpha 1) of float16/bfloat16 in float and
    // rounds once; single elements and scaled rows round after every update.
    const bool in_float = self.dim() > 1 && unit;
    const kernels::RowIndexRule rule{false, dim, ""};  // no negative indices
    queue(dst, "index_add", [o, i, v, in_float, rule](runtime::ThreadPool* p) {
        return kernels::index_put_rows(o, i, v, true, p, in_float, rule);
    });
    if (!dst.is_same(out)) out.copy_(dst);
    return out;
}

// ---- index_copy: rows of source into self at index along dim (KV-cache updates) -------------------
// Native for matching shapes and dtypes with a long index; anything else, and the 0-d forms, take
// the CPU path, whose checks word the errors.

at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out) {
    bool ok = plain_dtype(self.scalar_type()) && source.scalar_type() == self.scalar_type() &&
              out.scalar_type() == self.scalar_type() && index.dim() <= 1 && index.scalar_type() == at::kLong &&
              source.dim() == self.dim() && on_device(self.device(), index) &&
              on_device(self.device(), source) && on_device(self.device(), out);
    if (ok && self.dim() == 0 && index.numel() == 1 && (dim == 0 || dim == -1)) {
        // A 0-d self takes its one source element at index 0 (the kernel checks the index).
        if (!out.is_same(self)) {
            resize_out(out, {});
            out.copy_(self);
        }
        at::Tensor flat = out.view({1});
        index_copy_out(flat, 0, index.reshape({1}), source.reshape({1}), flat);
        return out;
    }
    ok = ok && rows_fit(self, dim, index, source);
    if (!ok) return cpu<ATEN_OP2(index_copy, out)>(self, dim, index, source, out);
    at::assert_no_internal_overlap(out);
    at::assert_no_overlap(out, index);
    at::assert_no_overlap(out, source);
    if (!out.is_same(self)) {
        resize_out(out, self.sizes());
        out.copy_(self);
    }
    if (index.numel() == 0) return out;
    at::Tensor dst = out.is_contiguous() ? out : out.contiguous();
    at::Tensor idx = index.reshape({-1}), src = source.contiguous();
    kernels::TensorView o = fold3(dst, dim), i = view_in(idx), v = fold3(src, dim, false);
    const kernels::RowIndexRule rule{false, dim, "index_copy_(): "};
    queue(dst, "index_copy", [o, i, v, rule](runtime::ThreadPool* p) {
        return kernels::index_put_rows(o, i, v, false, p, false, rule);
    });
    if (!dst.is_same(out)) out.copy_(dst);
    return out;
}

at::Tensor& index_copy_inplace(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
    return index_copy_out(self, dim, index, source, self);
}

at::Tensor index_copy_fn(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source) {
    at::Tensor out = at::empty_like(self);
    return index_copy_out(self, dim, index, source, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("scatter.src_out", scatter_src_out);
    m.impl("scatter.value_out", scatter_value_out);
    m.impl("scatter.reduce_out", scatter_reduce_out);
    m.impl("scatter.value_reduce_out", scatter_value_reduce_out);
    m.impl("scatter_add.out", scatter_add_out);
    m.impl("scatter_reduce.two_out", scatter_reduce_two_out);
    m.impl("nonzero", nonzero_fn);
    m.impl("masked_select", masked_select);
    m.impl("index.Tensor_out", index_out);
    m.impl("_index_put_impl_", index_put_impl_);
    m.impl("index_add.out", index_add_out);
    m.impl("index_copy.out", index_copy_out);
    m.impl("index_copy_", index_copy_inplace);
    m.impl("index_copy", index_copy_fn);
    m.impl("index_reduce.out", index_reduce_out);
}

}  // namespace ember::torch_glue
