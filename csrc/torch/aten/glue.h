// Helpers the register_<family>.cc files share: handing a call to the CPU fallback, and queueing
// a kernel that takes the device's thread pool on the current stream.
#pragma once

#include <ATen/Operators.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/DeviceGuard.h>

#include "../context.h"
#include "../fallback.h"

namespace ember::torch_glue {

// Runs `Op` through the visible CPU fallback (counted and reported like any missing kernel).
template <class Op, class... Args>
decltype(auto) cpu(Args&&... args) {
    return at::native::call_fallback_fn<&ember_cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

// The same, for ops whose schema has SymInt arguments.
template <class Op, class... Args>
decltype(auto) cpu_symint(Args&&... args) {
    return at::native::call_fallback_fn_symint<&ember_cpu_fallback, Op>::call(std::forward<Args>(args)...);
}

// Queues fn(pool) on the current stream of `like`'s device.
template <typename F>
void queue(const at::Tensor& like, const char* name, F&& fn) {
    c10::DeviceGuard guard(like.device());
    runtime::Device& dev = tensor_device(like);
    runtime::ThreadPool* pool = &dev.pool();
    enqueue(dev.current_stream(), name, [fn = std::forward<F>(fn), pool] { return fn(pool); });
}

}  // namespace ember::torch_glue
