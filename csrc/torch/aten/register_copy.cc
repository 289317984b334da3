// Copies in every direction, scalar reads, fill and async asserts.
//
// Ordering rules (as CUDA's): device work runs on the current stream of the device involved.
// A copy to or from pageable host memory synchronizes that stream and so returns with the data
// in place; with non_blocking=True and pinned host memory the transfer is queued and the host
// returns at once (the pinned block is fenced so it is not reused before the copy ran).
#include <ATen/MemoryOverlap.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstring>
#include <optional>

#include "../check.h"
#include "../context.h"
#include "../graph_capture.h"
#include "../profiler_bridge.h"
#include "kernels/copy.h"
#include "kernels/fill.h"
#include "glue.h"

namespace ember::torch_glue {
namespace {

bool is_ember(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }
bool is_pinned_host(const at::Tensor& t) {
    return runtime::host_allocator().is_pinned(t.storage().data());
}

// Same-device copy on the device: strides, broadcasting and dtype conversion in one kernel.
void copy_on_device(const at::Tensor& dst, const at::Tensor& src_in) {
    at::Tensor src = src_in.expand(dst.sizes());
    // As on CPU: a destination that overlaps itself or partly overlaps its source is refused.
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, src);
    runtime::Device& dev = tensor_device(dst);
    kernels::TensorView d = view_of(dst), s = view_in(src);
    runtime::ThreadPool* pool = &dev.pool();
    runtime::Stream& stream = dev.current_stream();
    uint64_t seq = enqueue(stream, "copy_", [d, s, pool] { return kernels::copy(d, s, pool); });
    if (profiler::Tracer* t = tracer()) {
        t->copy(profiler::CopyKind::kD2D, dst.nbytes(), stream.device(), stream.id(), seq);
    }
}

// float8_e4m3fn and float8_e5m2 convert to and from the real dtypes on the device (core's copy
// rounds as PyTorch does); the other storage-only dtypes convert on the host.
std::optional<kernels::DType> float8_dtype(c10::ScalarType t) {
    if (t == at::kFloat8_e4m3fn) return kernels::DType::kFloat8E4M3FN;
    if (t == at::kFloat8_e5m2) return kernels::DType::kFloat8E5M2;
    return std::nullopt;
}

bool float8_convertible(const at::Tensor& src, const at::Tensor& dst) {
    const auto s = src.scalar_type(), d = dst.scalar_type();
    const auto ok = [](c10::ScalarType t) { return float8_dtype(t) || (has_dtype(t) && !at::isComplexType(t)); };
    return (float8_dtype(s) || float8_dtype(d)) && ok(s) && ok(d);
}

// A kernel view of a float8 tensor (to_dtype refuses float8, so that no other kernel sees one).
kernels::TensorView float8_or_plain_view(const at::Tensor& t, bool writable) {
    const auto f8 = float8_dtype(t.scalar_type());
    if (!f8) return writable ? view_of(t) : view_in(t);
    kernels::TensorView v = writable ? view_of(t.view(at::kByte)) : view_in(t.view(at::kByte));
    v.dtype = *f8;
    return v;
}

void copy_float8_on_device(const at::Tensor& dst, const at::Tensor& src_in) {
    at::Tensor src = src_in.expand(dst.sizes());
    at::assert_no_internal_overlap(dst);
    at::assert_no_partial_overlap(dst, src);
    runtime::Device& dev = tensor_device(dst);
    kernels::TensorView d = float8_or_plain_view(dst, true), s = float8_or_plain_view(src, false);
    runtime::ThreadPool* pool = &dev.pool();
    runtime::Stream& stream = dev.current_stream();
    uint64_t seq = enqueue(stream, "copy_", [d, s, pool] { return kernels::copy(d, s, pool); });
    if (profiler::Tracer* t = tracer()) {
        t->copy(profiler::CopyKind::kD2D, dst.nbytes(), stream.device(), stream.id(), seq);
    }
}

void trace_queued_copy(profiler::CopyKind kind, size_t bytes, const runtime::Stream& stream, uint64_t seq) {
    if (profiler::Tracer* t = tracer()) t->copy(kind, bytes, stream.device(), stream.id(), seq);
}

// Host memory -> contiguous device memory of the same dtype and size.
void upload(const at::Tensor& dst, const at::Tensor& host, bool non_blocking, bool host_is_temp) {
    size_t bytes = host.nbytes();
    note_transfer(bytes, /*to_host=*/false);
    runtime::Stream& stream = current_stream_of(dst);
    void* d = dst.data_ptr();
    const void* h = host.data_ptr();
    if (host_is_temp) {
        check_not_capturing(stream.device(), "a copy from CPU memory that needs converting or staging",
                            "a replay would copy the values staged at capture time again. Copy into an "
                            "ember tensor before replaying, or from pinned memory of the same dtype "
                            "(non_blocking=True).");
        // We own the staging tensor: the task keeps it alive, so the host need not wait.
        uint64_t seq = enqueue(stream, "copy_h2d", [d, h, bytes, keep = host] {
            std::memcpy(d, h, bytes);
            return Status();
        });
        trace_queued_copy(profiler::CopyKind::kH2D, bytes, stream, seq);
    } else if (non_blocking && is_pinned_host(host)) {
        uint64_t seq = enqueue(stream, "copy_h2d", [d, h, bytes] {
            std::memcpy(d, h, bytes);
            return Status();
        });
        runtime::host_allocator().record_use(h, stream, seq);
        trace_queued_copy(profiler::CopyKind::kH2D, bytes, stream, seq);
    } else {
        // Pageable memory the caller may change after we return: copy now, after queued work.
        synchronize(stream);
        CopySpan span(profiler::CopyKind::kH2D, bytes, stream.device(), stream.id());
        std::memcpy(d, h, bytes);
    }
}

// Contiguous device memory -> host memory of the same dtype and size.
void download(const at::Tensor& host, const at::Tensor& src, bool non_blocking) {
    size_t bytes = src.nbytes();
    note_transfer(bytes, /*to_host=*/true);
    runtime::Stream& stream = current_stream_of(src);
    void* h = host.data_ptr();
    const void* s = src.const_data_ptr();
    if (non_blocking && is_pinned_host(host)) {
        uint64_t seq = enqueue(stream, "copy_d2h", [h, s, bytes] {
            std::memcpy(h, s, bytes);
            return Status();
        });
        runtime::host_allocator().record_use(h, stream, seq);
        trace_queued_copy(profiler::CopyKind::kD2H, bytes, stream, seq);
        return;
    }
    synchronize(stream);
    CopySpan span(profiler::CopyKind::kD2H, bytes, stream.device(), stream.id());
    std::memcpy(h, s, bytes);
}

void copy_host_to_device(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
    c10::DeviceGuard guard(dst.device());
    bool direct = src.scalar_type() == dst.scalar_type() && src.sizes() == dst.sizes() &&
                  src.is_contiguous() && dst.is_contiguous();
    if (direct) {
        upload(dst, src, non_blocking, /*host_is_temp=*/false);
        return;
    }
    at::Tensor staged = src.to(dst.scalar_type()).expand(dst.sizes()).contiguous();
    // Only a fresh staging copy may be read after we return; a view of the caller's memory may not.
    bool temp = !staged.storage().is_alias_of(src.storage());
    if (dst.is_contiguous()) {
        upload(dst, staged, non_blocking, temp);
        return;
    }
    at::Tensor tmp = at::empty(dst.sizes(), dst.options());
    upload(tmp, staged, non_blocking, temp);
    copy_on_device(dst, tmp);
}

void copy_device_to_host(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
    c10::DeviceGuard guard(src.device());
    at::Tensor packed = src.contiguous();
    if (packed.scalar_type() == dst.scalar_type() && packed.sizes() == dst.sizes() &&
        dst.is_contiguous()) {
        download(dst, packed, non_blocking);
        return;
    }
    at::Tensor tmp = at::empty(packed.sizes(), packed.options().device(c10::kCPU));
    download(tmp, packed, false);
    dst.copy_(tmp);
}

at::Tensor wrapper_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);

// A tensor without its lazy conjugate/negation bits: a view of the same stored values.
at::Tensor stored_values(const at::Tensor& t) {
    at::Tensor r = t;
    if (r.is_conj()) r = r.conj();
    if (r.is_neg()) r = at::_neg_view(r);
    return r;
}

// Copies whose source or destination carries a conjugate/negation bit. Both bits are involutions
// that commute, so dst stores self's stored values with conj applied when exactly one side has
// the conj bit, and neg likewise. Between ember tensors of one dtype that do not partly overlap
// this runs on the device (a copy, then conj_physical_ / neg_ in place: resolve_conj() in a
// graph capture, complex RoPE's backward); otherwise the logical values are formed on the host,
// where PyTorch's CPU kernels apply the bits, and the stored values written.
void copy_with_lazy_bits(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
    if (is_ember(self) && is_ember(dst) && self.device() == dst.device() && self.scalar_type() == dst.scalar_type()) {
        at::Tensor src = stored_values(self), raw_dst = stored_values(dst);
        const auto overlap = at::get_overlap_status(src, raw_dst);
        const bool same = src.sizes() == raw_dst.sizes() && src.strides() == raw_dst.strides();
        if (overlap == at::MemOverlapStatus::No || (overlap == at::MemOverlapStatus::Full && same)) {
            if (overlap == at::MemOverlapStatus::No) wrapper_copy_from(src, raw_dst, non_blocking);
            if (self.is_conj() != dst.is_conj()) raw_dst.conj_physical_();
            if (self.is_neg() != dst.is_neg()) raw_dst.neg_();
            return;
        }
    }
    at::Tensor value = wrapper_copy_from(stored_values(self), at::empty(self.sizes(), self.options().device(c10::kCPU)), false);
    if (self.is_conj()) value = value.conj_physical();
    if (self.is_neg()) value = value.neg();
    // dst's logical value is conj/neg of what it stores, so store the inverse of `value`.
    if (dst.is_conj()) value = value.conj_physical();
    if (dst.is_neg()) value = value.neg();
    at::Tensor raw_dst = stored_values(dst);
    wrapper_copy_from(value.to(raw_dst.scalar_type()), raw_dst, non_blocking);
}

at::Tensor wrapper_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
    TORCH_CHECK(self.defined() && dst.defined(), "ember: copy_ of an undefined tensor");
    if (dst.numel() == 0) return dst;
    if (self.is_conj() || self.is_neg() || dst.is_conj() || dst.is_neg()) {
        copy_with_lazy_bits(self, dst, non_blocking);
        return dst;
    }
    if (is_ember(self) && is_ember(dst) && (storage_only_dtype(self.scalar_type()) || storage_only_dtype(dst.scalar_type()))) {
        if (self.scalar_type() == dst.scalar_type() && self.device() == dst.device()) {
            // The same bits: copied as an integer type of the same width, which the kernels have.
            const auto width = self.element_size() == 1 ? at::kByte : self.element_size() == 2 ? at::kShort
                               : self.element_size() == 4 ? at::kInt : at::kLong;
            wrapper_copy_from(self.view(width), dst.view(width), non_blocking);
        } else if (self.device() == dst.device() && float8_convertible(self, dst)) {
            c10::DeviceGuard guard(dst.device());
            copy_float8_on_device(dst, self);
        } else {  // a conversion: on the host, where PyTorch defines it, then the same bits in place
            at::Tensor converted = self.to(c10::kCPU).to(dst.scalar_type()).contiguous().to(dst.device());
            wrapper_copy_from(converted, dst, non_blocking);
        }
    } else if (is_ember(self) && is_ember(dst)) {
        bool same_device = self.device() == dst.device();
        bool supported = kernels::copy_supports(to_dtype(dst.scalar_type()), to_dtype(self.scalar_type()));
        if (same_device && supported) {
            c10::DeviceGuard guard(dst.device());
            copy_on_device(dst, self);
        } else {
            // Across devices or for complex conversions: through host memory, in order.
            dst.copy_(self.to(c10::kCPU), non_blocking);
        }
    } else if (is_ember(dst)) {
        TORCH_CHECK(self.device().is_cpu(), "ember: cannot copy from ", self.device(), " to ", dst.device());
        const bool stored = storage_only_dtype(dst.scalar_type()) || storage_only_dtype(self.scalar_type());
        if (stored && (self.scalar_type() != dst.scalar_type() || !self.is_contiguous() || !dst.is_contiguous())) {
            // Storage dtypes move as contiguous bytes; the layout is then arranged on the device
            // with the same-bits copy above, and a conversion is the CPU's.
            at::Tensor host = self.to(dst.scalar_type()).contiguous();
            at::Tensor staged = at::empty(dst.sizes(), dst.options().memory_format(at::MemoryFormat::Contiguous));
            copy_host_to_device(staged, host, /*non_blocking=*/false);
            return wrapper_copy_from(staged, dst, non_blocking);
        }
        copy_host_to_device(dst, self, non_blocking);
    } else {
        TORCH_CHECK(dst.device().is_cpu(), "ember: cannot copy from ", self.device(), " to ", dst.device());
        if (storage_only_dtype(self.scalar_type()) && !self.is_contiguous()) {
            at::Tensor packed = at::empty(self.sizes(), self.options().memory_format(at::MemoryFormat::Contiguous));
            wrapper_copy_from(self, packed, false);  // the same bits, made contiguous on the device
            return wrapper_copy_from(packed, dst, non_blocking);
        }
        copy_device_to_host(dst, self, non_blocking);
    }
    return dst;
}

at::Tensor wrapper_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
    if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
    return wrapper_copy_from(self, dst, false);
}

c10::Scalar wrapper_local_scalar_dense(const at::Tensor& self) {
    TORCH_CHECK(self.numel() == 1, "ember: a Tensor with ", self.numel(),
                " elements cannot be converted to Scalar");
    return at::_local_scalar_dense(self.to(c10::kCPU));
}

kernels::Scalar to_kernel_scalar(const c10::Scalar& v) {
    kernels::Scalar s;
    if (v.isBoolean()) {
        s.kind = kernels::Scalar::Kind::kBool;
        s.i = v.toBool();
    } else if (v.isIntegral(false)) {
        s.kind = kernels::Scalar::Kind::kInt;
        s.i = v.toLong();
    } else {
        s.kind = kernels::Scalar::Kind::kFloat;
        s.f = v.toDouble();
    }
    return s;
}

at::Tensor& wrapper_fill_scalar(at::Tensor& self, const c10::Scalar& value) {
    if (self.numel() == 0) return self;
    if (self.is_complex() && !self.is_conj()) {
        // The CPU's conversion check (and message), then each part filled through the real view,
        // with no overlap check: fill writes one value, so an expanded self is as fine as on the CPU.
        AT_DISPATCH_V2(self.scalar_type(), "ember_fill_check", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                       AT_EXPAND(AT_COMPLEX_TYPES), at::kComplexHalf);
        const c10::complex<double> v = value.toComplexDouble();
        at::Tensor parts = at::view_as_real(self);
        at::Tensor re = parts.select(-1, 0), im = parts.select(-1, 1);
        wrapper_fill_scalar(re, v.real());
        wrapper_fill_scalar(im, v.imag());
        return self;
    }
    if (storage_only_dtype(self.scalar_type())) {  // the value as the CPU converts it
        self.copy_(at::full({}, value, self.options().device(c10::kCPU)));
        return self;
    }
    if (self.is_complex() || value.isComplex()) {
        // (For a real self, the CPU's conversion raises its own error: "value cannot be converted".)
        self.copy_(at::full({}, value, self.options().device(c10::kCPU)));
        return self;
    }
    check_scalar_fits(value, self.scalar_type());
    c10::DeviceGuard guard(self.device());
    runtime::Device& dev = tensor_device(self);
    kernels::TensorView d = view_of(self);
    kernels::Scalar s = to_kernel_scalar(value);
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), "fill_", [d, s, pool] { return kernels::fill(d, s, pool); });
    return self;
}

at::Tensor& wrapper_fill_tensor(at::Tensor& self, const at::Tensor& value) {
    TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
                value.dim(), " dimensions.");
    return wrapper_fill_scalar(self, value.item());
}

at::Tensor& wrapper_zero(at::Tensor& self) { return wrapper_fill_scalar(self, 0); }

// Tensor.record_stream: the block is not reused before work queued on `s` has finished.
void wrapper_record_stream(at::Tensor& self, c10::Stream s) {
    TORCH_CHECK(s.device_type() == c10::DeviceType::PrivateUse1,
                "ember: record_stream expects an ember stream, got ", s);
    c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
        ->recordDataPtrOnStream(self.storage().data_ptr(), s);
}

// torch._assert_async: checked on the device, reported at the next synchronizing call.
void assert_async(const at::Tensor& self, std::string message) {
    TORCH_CHECK(self.numel() == 1, "Boolean value of Tensor with ", self.numel() == 0 ? "no values" : "more than one value",
                " is ambiguous");
    c10::DeviceGuard guard(self.device());
    kernels::TensorView v = view_in(self);
    enqueue(current_stream_of(self), "_assert_async", [v, message = std::move(message)] {
        kernels::TensorView one;
        double value = 0;
        one.data = &value;
        one.dtype = kernels::DType::kFloat64;
        kernels::TensorView src = v;
        src.ndim = 0;
        if (kernels::is_complex(v.dtype)) {
            // Nonzero if either part is: view the number as its two real parts.
            double parts[2];
            kernels::TensorView pair = src;
            pair.dtype = v.dtype == kernels::DType::kComplex64 ? kernels::DType::kFloat32
                                                              : kernels::DType::kFloat64;
            pair.ndim = 1;
            pair.sizes[0] = 2;
            pair.strides[0] = 1;
            kernels::TensorView both = one;
            both.data = parts;
            both.ndim = 1;
            both.sizes[0] = 2;
            both.strides[0] = 1;
            EMBER_RETURN_IF_ERROR(kernels::copy(both, pair, nullptr));
            value = (parts[0] != 0 || parts[1] != 0) ? 1 : 0;
        } else {
            EMBER_RETURN_IF_ERROR(kernels::copy(one, src, nullptr));
        }
        if (value == 0) return Status(StatusCode::kKernelFailed, message);
        return Status();
    });
}

void wrapper_assert_async(const at::Tensor& self) {
    assert_async(self, "Expected Tensor with single nonzero value, but got zero");
}
void wrapper_assert_async_msg(const at::Tensor& self, c10::string_view msg) {
    assert_async(self, std::string(msg));
}

}  // namespace

// Copies reach ember's _copy_from with the conjugate/negation bits still set; PyTorch's fallbacks
// for those keys would materialize the tensor with another copy, which lands here again, forever.
// Passing through lets copy_with_lazy_bits handle them.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
    m.impl("_copy_from", torch::CppFunction::makeFallthrough());
    m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
    m.impl("_copy_from", torch::CppFunction::makeFallthrough());
    m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_copy_from", wrapper_copy_from);
    m.impl("_copy_from_and_resize", wrapper_copy_from_and_resize);
    m.impl("_local_scalar_dense", wrapper_local_scalar_dense);
    m.impl("fill_.Scalar", wrapper_fill_scalar);
    m.impl("fill_.Tensor", wrapper_fill_tensor);
    m.impl("zero_", wrapper_zero);
    m.impl("record_stream", wrapper_record_stream);
    m.impl("_assert_async", wrapper_assert_async);
    m.impl("_assert_async.msg", wrapper_assert_async_msg);
}

}  // namespace ember::torch_glue
