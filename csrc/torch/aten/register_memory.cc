// Tensor creation, storage and view ops: what every other op builds on. Views share storage
// exactly as on CPU; nothing here touches device memory except resize_, which queues its copy.
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/native/TensorShape.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "../allocator.h"
#include "../context.h"

namespace ember::torch_glue {
namespace {

constexpr c10::DispatchKeySet kEmberKeys(c10::DispatchKey::PrivateUse1);

c10::Device target_device(std::optional<c10::Device> device) {
    c10::Device d = device.value_or(c10::Device(c10::DeviceType::PrivateUse1));
    TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "ember: expected an ember device, got ", d);
    if (!d.has_index()) d.set_index(static_cast<c10::DeviceIndex>(runtime::current_device()));
    return d;
}

void check_dtype(c10::ScalarType t) {
    TORCH_CHECK_NOT_IMPLEMENTED(storable_dtype(t), "ember: dtype ", t,
                                " is not supported on the ember device");
}

// Under torch.use_deterministic_algorithms(True) (and the default
// torch.utils.deterministic.fill_uninitialized_memory) new memory holds NaN or the integer
// maximum, as on CPU and CUDA, instead of whatever an earlier tensor left in the cached block.
bool fill_uninitialized() {
    const auto& ctx = at::globalContext();
    return C10_UNLIKELY(ctx.deterministicAlgorithms() && ctx.deterministicFillUninitializedMemory());
}

at::Tensor filled_if_deterministic(at::Tensor t) {
    if (fill_uninitialized() && t.numel() > 0) at::native::fill_empty_deterministic_(t);
    return t;
}

at::Tensor wrapper_empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                                       std::optional<c10::Layout> layout,
                                       std::optional<c10::Device> device,
                                       std::optional<bool> pin_memory,
                                       std::optional<c10::MemoryFormat> memory_format) {
    TORCH_CHECK(!pin_memory.value_or(false), "ember: only CPU tensors can be pinned");
    TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
                "ember: only strided tensors are supported");
    auto t = dtype.value_or(c10::get_default_dtype_as_scalartype());
    check_dtype(t);
    c10::DeviceGuard guard(target_device(device));
    return filled_if_deterministic(at::detail::empty_generic(size, device_allocator(), kEmberKeys, t, memory_format));
}

at::Tensor wrapper_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                                 std::optional<c10::ScalarType> dtype,
                                 std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                                 std::optional<bool> pin_memory) {
    TORCH_CHECK(!pin_memory.value_or(false), "ember: only CPU tensors can be pinned");
    TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
                "ember: only strided tensors are supported");
    auto t = dtype.value_or(c10::get_default_dtype_as_scalartype());
    check_dtype(t);
    c10::DeviceGuard guard(target_device(device));
    return filled_if_deterministic(at::detail::empty_strided_generic(size, stride, device_allocator(), kEmberKeys, t));
}

// Makes the storage large enough for `self`'s current geometry.
void ensure_storage(const at::Tensor& self) {
    auto* impl = self.unsafeGetTensorImpl();
    size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(),
                                                      impl->dtype().itemsize(),
                                                      impl->storage_offset());
    if (needed > impl->storage().nbytes()) resize_storage_bytes(impl->storage(), needed);
}

const at::Tensor& wrapper_resize_(const at::Tensor& self, c10::IntArrayRef size,
                                  std::optional<c10::MemoryFormat> memory_format) {
    auto* impl = self.unsafeGetTensorImpl();
    if (impl->sizes() != size) {
        const auto old_nbytes = static_cast<int64_t>(impl->storage().nbytes());
        impl->set_sizes_contiguous(size);
        ensure_storage(self);
        if (fill_uninitialized()) at::native::fill_resize_deterministic_(self, old_nbytes);
    }
    if (memory_format.has_value()) {
        TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                    "ember: unsupported memory format Preserve for resize_");
        impl->empty_tensor_restride(*memory_format);
    }
    return self;
}

at::Tensor& set_geometry(at::Tensor& self, const c10::Storage& source, int64_t offset,
                         c10::IntArrayRef size, c10::IntArrayRef stride) {
    auto* impl = self.unsafeGetTensorImpl();
    TORCH_CHECK(source.device() == self.device(),
                "Attempted to set the storage of a tensor on device \"", self.device(),
                "\" to a storage on different device \"", source.device(),
                "\".  This is no longer allowed; the devices must match.");
    if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(source);
    TORCH_CHECK(offset >= 0, "ember: set_ got a negative storage offset ", offset);
    impl->set_storage_offset(offset);
    if (stride.empty()) {
        impl->set_sizes_contiguous(size);
    } else {
        TORCH_CHECK(stride.size() == size.size(), "ember: set_ needs one stride per size");
        impl->set_sizes_and_strides(size, stride);
    }
    ensure_storage(self);
    return self;
}

at::Tensor& wrapper_set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                                       c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
    return set_geometry(self, source, offset.expect_int(), C10_AS_INTARRAYREF_SLOW(size),
                        C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& wrapper_set_storage(at::Tensor& self, c10::Storage source) {
    int64_t elems = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
    return set_geometry(self, source, 0, {elems}, {});
}

at::Tensor& wrapper_set_tensor(at::Tensor& self, const at::Tensor& source) {
    if (self.is_same(source)) return self;
    return set_geometry(self, source.storage(), source.storage_offset(), source.sizes(),
                        source.strides());
}

at::Tensor& wrapper_set_empty(at::Tensor& self) {
    c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
    return set_geometry(self, empty, 0, {0}, {});
}

at::Tensor wrapper_as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                              c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
    return at::native::as_strided_tensorimpl(
        self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
        offset.has_value() ? std::make_optional(offset->expect_int()) : std::nullopt);
}

at::Tensor wrapper_view(const at::Tensor& self, c10::SymIntArrayRef size) {
    return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor wrapper_reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                                 c10::SymIntArrayRef stride) {
    return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                      C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor wrapper_unfold(const at::Tensor& self, int64_t dim, int64_t size, int64_t step) {
    return at::native::unfold(self, dim, size, step);
}

// `param.data = other` and nn.Module.to() swap a tensor's metadata in place only between types
// PyTorch calls shallow-copy compatible; its built-in list has CPU and CUDA but no PrivateUse1.
// Without this, moving a module to ember makes new Parameter objects, and an optimizer built
// before the move keeps updating the stale CPU tensors. Dense strided CPU and ember tensors are
// as interchangeable as CPU and CUDA ones.
bool wrapper_has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
    if (self.key_set() == from.key_set()) return true;
    auto movable = [](const at::Tensor& t) {
        auto type = t.device().type();
        return t.layout() == c10::kStrided &&
               (type == c10::DeviceType::CPU || type == c10::DeviceType::PrivateUse1);
    };
    return movable(self) && movable(from);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
    m.impl("_has_compatible_shallow_copy_type", wrapper_has_compatible_shallow_copy_type);
    m.impl("empty.memory_format", wrapper_empty_memory_format);
    m.impl("empty_strided", wrapper_empty_strided);
    m.impl("resize_", wrapper_resize_);
    m.impl("set_.source_Storage_storage_offset", wrapper_set_storage_offset);
    m.impl("set_.source_Storage", wrapper_set_storage);
    m.impl("set_.source_Tensor", wrapper_set_tensor);
    m.impl("set_", wrapper_set_empty);
    m.impl("as_strided", wrapper_as_strided);
    m.impl("view", wrapper_view);
    m.impl("_reshape_alias", wrapper_reshape_alias);
    m.impl("unfold", wrapper_unfold);
    m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
    m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
}

}  // namespace ember::torch_glue
