#include "context.h"

#include <Python.h>

#include "check.h"
#include "graph_capture.h"
#include "profiler_bridge.h"

namespace ember::torch_glue {

[[noreturn]] void raise_status(const Status& status) {
    switch (status.code()) {
        case StatusCode::kOutOfMemory:
            TORCH_CHECK_WITH(OutOfMemoryError, false, status.message());
        case StatusCode::kInvalidArgument:
            TORCH_CHECK_VALUE(false, status.message());
        case StatusCode::kUnimplemented:
            TORCH_CHECK_NOT_IMPLEMENTED(false, "ember: not supported: ", status.message());
        default:
            TORCH_CHECK(false, status.message());
    }
}

runtime::Device& device_for(c10::DeviceIndex index) {
    int i = index < 0 ? runtime::current_device() : index;
    return *value_or_raise(runtime::checked_device(i));
}

runtime::Device& tensor_device(const at::Tensor& t) { return device_for(t.device().index()); }

runtime::Stream& current_stream_of(const at::Tensor& t) { return tensor_device(t).current_stream(); }

bool has_dtype(c10::ScalarType t) {
    switch (t) {
        case at::kBool: case at::kByte: case at::kChar: case at::kShort: case at::kInt:
        case at::kLong: case at::kHalf: case at::kBFloat16: case at::kFloat: case at::kDouble:
        case at::kComplexFloat: case at::kComplexDouble:
            return true;
        default:
            return false;
    }
}

// Dtypes ember tensors hold without kernels of their own (PyTorch's CPU has few for them
// either): allocation, copies and views work; every op on them takes the CPU fallback, so each
// works or fails exactly as on the CPU.
bool storage_only_dtype(c10::ScalarType t) {
    switch (t) {
        case at::kUInt16: case at::kUInt32: case at::kUInt64: case at::kComplexHalf:
        case at::kFloat8_e4m3fn: case at::kFloat8_e5m2: case at::kFloat8_e4m3fnuz: case at::kFloat8_e5m2fnuz:
            return true;
        default:
            return false;
    }
}

bool storable_dtype(c10::ScalarType t) { return has_dtype(t) || storage_only_dtype(t); }

kernels::DType to_dtype(c10::ScalarType t) {
    using kernels::DType;
    switch (t) {
        case at::kBool: return DType::kBool;
        case at::kByte: return DType::kUInt8;
        case at::kChar: return DType::kInt8;
        case at::kShort: return DType::kInt16;
        case at::kInt: return DType::kInt32;
        case at::kLong: return DType::kInt64;
        case at::kHalf: return DType::kFloat16;
        case at::kBFloat16: return DType::kBFloat16;
        case at::kFloat: return DType::kFloat32;
        case at::kDouble: return DType::kFloat64;
        case at::kComplexFloat: return DType::kComplex64;
        case at::kComplexDouble: return DType::kComplex128;
        default:
            TORCH_CHECK_NOT_IMPLEMENTED(false, "ember: dtype ", t, " is not supported on the ember device");
    }
}

namespace {
kernels::TensorView tensor_view(const at::Tensor& t, bool writable) {
    // Every tensor a kernel reads or writes is device memory. A CPU tensor here is an out= or
    // input of another device that an op's glue let through; host memory would even work, but
    // the kernel runs later, so the CPU tensor could be freed (or read) before it is written.
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
                "Expected all tensors to be on the same device, but found at least two devices, ember and ",
                t.device(), "!");
    kernels::TensorView v;
    TORCH_CHECK(t.dim() <= kernels::kMaxDims, "ember: tensors with more than ", kernels::kMaxDims,
                " dimensions are not supported");
    v.data = writable ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
    v.dtype = to_dtype(t.scalar_type());
    v.ndim = static_cast<int>(t.dim());
    for (int i = 0; i < v.ndim; ++i) {
        v.sizes[i] = t.size(i);
        v.strides[i] = t.stride(i);
    }
    return v;
}
}  // namespace

kernels::TensorView view_of(const at::Tensor& t) { return tensor_view(t, true); }
kernels::TensorView view_in(const at::Tensor& t) { return tensor_view(t, false); }

uint64_t enqueue(runtime::Stream& stream, const char* name, runtime::Task task) {
    if (any_capture()) check_not_capturing_elsewhere(stream, name);
    return value_or_raise(stream.enqueue(name, std::move(task)));
}

WithoutGil::WithoutGil() {
    if (Py_IsInitialized() && !_Py_IsFinalizing() && PyGILState_Check()) state_ = PyEval_SaveThread();
}

WithoutGil::~WithoutGil() {
    if (state_ != nullptr) PyEval_RestoreThread(static_cast<PyThreadState*>(state_));
}

void synchronize(runtime::Stream& stream) {
    profiler::Tracer* t = tracer();
    if (t) t->synchronize_begin(stream.device());
    Status st;
    {
        WithoutGil no_gil;
        st = stream.synchronize();
    }
    if (t) t->synchronize_end(stream.device());
    EMBER_CHECK(st);
}

}  // namespace ember::torch_glue
