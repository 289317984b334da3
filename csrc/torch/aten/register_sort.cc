// Ordering ops: sort and topk (kernels/sort), flip and roll (kernels/index/reorder). Inputs are
// made contiguous and viewed [outer, n, inner] along the op's dimension; outputs that are not
// contiguous are computed into a temporary and copied, as PyTorch's out= contract allows.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <bitset>

#include "kernels/index/reorder.h"
#include "kernels/sort/sort.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

// `out` itself when it can be written through a [outer, n, inner] view, else a fresh tensor the
// caller copies back with finish().
at::Tensor writable(const at::Tensor& out, const at::Tensor& avoid) {
    if (out.is_contiguous() && !out.is_same(avoid)) return out;
    return at::empty(out.sizes(), out.options().memory_format(at::MemoryFormat::Contiguous));
}

void finish(at::Tensor& out, const at::Tensor& tmp) {
    if (!tmp.is_same(out)) out.copy_(tmp);
}

// The kernels compare bytes: a bool tensor holding other bytes than 0/1 (a uint8 tensor viewed as
// bool) is normalized first, so that every non-zero byte is true, as on the CPU.
at::Tensor sort_source(const at::Tensor& self) {
    return self.scalar_type() == at::kBool ? self.ne(false).contiguous() : self.contiguous();
}

bool native_sort_input(const at::Tensor& self, const at::Tensor& values, const at::Tensor& indices) {
    return plain_dtype(self.scalar_type()) && values.scalar_type() == self.scalar_type() &&
           indices.scalar_type() == at::kLong && on_device(self.device(), values) && on_device(self.device(), indices);
}

// ---- sort / topk ----------------------------------------------------------------------------

std::tuple<at::Tensor&, at::Tensor&> sort_out(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                              bool descending, at::Tensor& values, at::Tensor& indices) {
    if (!native_sort_input(self, values, indices))
        return cpu<ATEN_OP2(sort, values_stable)>(self, stable, dim, descending, values, indices);
    dim = at::maybe_wrap_dim(dim, self.dim());
    resize_out(values, self.sizes());
    resize_out(indices, self.sizes());
    if (self.numel() == 0) return {values, indices};
    at::Tensor src = sort_source(self), v = writable(values, self), i = writable(indices, self);
    kernels::TensorView vo = fold3(v, dim), io = fold3(i, dim), in = fold3(src, dim, false);
    // The kernel is always stable, which also satisfies stable=False.
    queue(v, "sort", [vo, io, in, descending](runtime::ThreadPool* p) {
        return kernels::sort(vo, io, in, descending, true, p);
    });
    finish(values, v);
    finish(indices, i);
    return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> topk_out(const at::Tensor& self, c10::SymInt k_sym, int64_t dim, bool largest,
                                              bool sorted, at::Tensor& values, at::Tensor& indices) {
    if (!native_sort_input(self, values, indices))
        return cpu_symint<ATEN_OP2(topk, values)>(self, k_sym, dim, largest, sorted, values, indices);
    const int64_t k = k_sym.expect_int();
    dim = at::maybe_wrap_dim(dim, self.dim());
    const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
    TORCH_CHECK(k >= 0 && k <= n, "selected index k out of range");
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    if (self.dim() > 0) shape[dim] = k;
    resize_out(values, shape);
    resize_out(indices, shape);
    if (values.numel() == 0) return {values, indices};
    at::Tensor src = sort_source(self), v = writable(values, self), i = writable(indices, self);
    kernels::TensorView vo = fold3(v, dim), io = fold3(i, dim), in = fold3(src, dim, false);
    queue(v, "topk", [vo, io, in, k, largest, sorted](runtime::ThreadPool* p) {
        return kernels::topk(vo, io, in, k, largest, sorted, p);
    });
    finish(values, v);
    finish(indices, i);
    return {values, indices};
}

// ---- flip / roll ----------------------------------------------------------------------------
// Results take the CPU's layouts: flip keeps its input's strides, roll keeps channels-last.

at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims) {
    if (!plain_dtype(self.scalar_type())) return cpu<ATEN_OP(flip)>(self, dims);
    std::bitset<64> seen = at::dim_list_to_bitset(dims, self.dim());  // wraps, rejects repeats
    at::Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
    if (self.numel() == 0) return out;
    uint64_t mask = self.dim() == 0 ? 0 : seen.to_ullong();
    kernels::TensorView o = view_of(out), i = view_in(self);
    queue(out, "flip", [o, i, mask](runtime::ThreadPool* p) { return kernels::flip(o, i, mask, p); });
    return out;
}

at::Tensor roll_dim(const at::Tensor& self, int64_t dim, int64_t shift) {
    at::Tensor out = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
    if (self.numel() == 0) return out;
    kernels::TensorView o = view_of(out), i = view_in(self);
    int d = static_cast<int>(dim);
    queue(out, "roll", [o, i, d, shift](runtime::ThreadPool* p) { return kernels::roll(o, i, d, shift, p); });
    return out;
}

at::Tensor roll(const at::Tensor& self, c10::SymIntArrayRef shifts_sym, at::IntArrayRef dims) {
    std::vector<int64_t> shifts;
    for (const auto& s : shifts_sym) shifts.push_back(s.expect_int());
    if (!plain_dtype(self.scalar_type()) || shifts.empty() || (!dims.empty() && dims.size() != shifts.size()))
        return cpu_symint<ATEN_OP(roll)>(self, shifts_sym, dims);
    if (dims.empty()) {  // roll the flattened tensor, as PyTorch does
        TORCH_CHECK(shifts.size() == 1, "roll: shifts and dims must align when dims is empty");
        at::Tensor flat = self.contiguous().view({-1});
        return roll_dim(flat, 0, shifts[0]).view(self.sizes());
    }
    // Checked here, at the call, with CPU's message (the kernel would fail only later).
    TORCH_CHECK_INDEX(self.dim() > 0, "Dimension specified as ", dims[0], " but tensor has no dimensions");
    at::Tensor out = self;
    for (size_t k = 0; k < shifts.size(); ++k) {
        out = roll_dim(out, at::maybe_wrap_dim(dims[k], self.dim()), shifts[k]);
    }
    return out.is_same(self) ? self.clone() : out;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("sort.values_stable", sort_out);
    m.impl("topk.values", topk_out);
    m.impl("flip", flip);
    m.impl("roll", roll);
}

}  // namespace ember::torch_glue
