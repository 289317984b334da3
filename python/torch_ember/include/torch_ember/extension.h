// The C++ API for ahead-of-time extensions that add ember kernels (header-only).
//
//   #include <torch/extension.h>
//   #include <torch_ember/extension.h>
//
//   at::Tensor my_op_ember(const at::Tensor& x) {
//       at::Tensor out = at::empty_like(x);
//       auto in = ember::ext::view<const float>(x);   // pointer, sizes, strides
//       auto o = ember::ext::view<float>(out);
//       int dev = x.device().index();
//       ember::ext::enqueue(dev, "my_ns::my_op", [=] {           // on the current stream
//           ember::ext::parallel_for(dev, o.numel(), 1 << 14, [=](int64_t lo, int64_t hi) {
//               for (int64_t i = lo; i < hi; ++i) o.data[i] = in.data[i] * 2;
//           });
//           return ember::ext::Error();                          // or Error("what went wrong")
//       });
//       return out;
//   }
//   EMBER_LIBRARY_IMPL(my_ns, m) { m.impl("my_op", my_op_ember); }
//
// The rules are those of Ember's own kernels. A kernel is queued, not run: the host returns at
// once and the kernel runs after the work queued before it on that stream. A failure it returns
// is raised, naming the kernel, at the next synchronizing call. The task captures plain values
// and pointers, never tensors: temporaries may be dropped once it is queued, because the
// allocator reuses their memory only for work queued later on the same stream.
// Build with torch.utils.cpp_extension and include torch_ember.get_include(). For elementwise
// math that vectorizes inside such loops, <torch_ember/vec_math.h> has the float exp, exp2, log,
// log1p, tanh and erf Ember's own kernels use (ember::vmath::exp(x), ...).
#pragma once

#include <Python.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "torch_ember/extension_abi.h"

#if __has_include(<torch/library.h>)
#include <ATen/ATen.h>
#include <torch/library.h>
// Registers ember kernels for the operators of namespace `ns` (TORCH_LIBRARY_IMPL on ember's
// dispatch key, PrivateUse1).
#define EMBER_LIBRARY_IMPL(ns, m) TORCH_LIBRARY_IMPL(ns, PrivateUse1, m)
#endif

namespace ember::ext {

// A kernel's result: empty is success, anything else is the message raised at the next sync.
class Error {
  public:
    Error() = default;
    explicit Error(std::string message) : message_(std::move(message)) {}
    bool ok() const { return message_.empty(); }
    const std::string& message() const { return message_; }

  private:
    std::string message_;
};

// The table torch_ember._C publishes (import torch_ember first).
inline const EmberExtensionApi& api() {
    static const EmberExtensionApi* table = [] {
        PyGILState_STATE gil = PyGILState_Ensure();
        auto* t = static_cast<const EmberExtensionApi*>(PyCapsule_Import("torch_ember._C._extension_api", 0));
        if (t == nullptr) PyErr_Clear();
        PyGILState_Release(gil);
        if (t == nullptr) throw std::runtime_error("ember extension: torch_ember._C is not loaded (import torch_ember)");
        if (t->version < EMBER_EXTENSION_API_VERSION) {
            throw std::runtime_error("ember extension: built for a newer torch_ember (API version " +
                                     std::to_string(EMBER_EXTENSION_API_VERSION) + ", loaded " +
                                     std::to_string(t->version) + ")");
        }
        return t;
    }();
    return *table;
}

// Queues fn() -> Error on the current stream of ember device `device`.
template <typename F>
void enqueue(int device, const char* name, F fn) {
    auto* held = new F(std::move(fn));
    char err[512] = {0};
    int rc = api().enqueue(
        device, name,
        [](void* ctx, char* msg, size_t len) {
            Error e = (*static_cast<F*>(ctx))();
            if (!e.ok()) std::snprintf(msg, len, "%s", e.message().c_str());
        },
        held, [](void* ctx) { delete static_cast<F*>(ctx); }, err, sizeof(err));
    if (rc != 0) throw std::runtime_error(err);
}

// Splits [0, n) over the device's compute threads: body(begin, end) for chunks of >= grain.
template <typename F>
void parallel_for(int device, int64_t n, int64_t grain, const F& body) {
    api().parallel_for(device, n, grain,
                       [](void* ctx, int64_t lo, int64_t hi) { (*static_cast<const F*>(ctx))(lo, hi); },
                       const_cast<F*>(&body));
}

inline int num_threads(int device) { return api().num_threads(device); }

// A tensor as a kernel sees it: element pointer, sizes and strides (in elements).
template <typename T>
struct View {
    static constexpr int kMaxDims = 8;
    T* data = nullptr;
    int dim = 0;
    int64_t sizes[kMaxDims] = {};
    int64_t strides[kMaxDims] = {};
    int64_t numel() const {
        int64_t n = 1;
        for (int i = 0; i < dim; ++i) n *= sizes[i];
        return n;
    }
    bool contiguous() const {
        int64_t expect = 1;
        for (int i = dim - 1; i >= 0; --i) {
            if (sizes[i] != 1 && strides[i] != expect) return false;
            expect *= sizes[i];
        }
        return true;
    }
};

#if __has_include(<torch/library.h>)
// The view of an ember tensor; T must match its dtype (const T for a tensor only read).
template <typename T>
View<T> view(const at::Tensor& t) {
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "ember extension: expected an ember tensor, got ",
                t.device());
    TORCH_CHECK(t.dim() <= View<T>::kMaxDims, "ember extension: at most ", View<T>::kMaxDims, " dims, got ", t.dim());
    TORCH_CHECK(t.scalar_type() == c10::CppTypeToScalarType<std::remove_const_t<T>>::value,
                "ember extension: the view's element type does not match the tensor's dtype ", t.scalar_type());
    View<T> v;
    v.data = static_cast<T*>(t.data_ptr());
    v.dim = static_cast<int>(t.dim());
    for (int i = 0; i < v.dim; ++i) {
        v.sizes[i] = t.size(i);
        v.strides[i] = t.stride(i);
    }
    return v;
}
#endif

}  // namespace ember::ext
