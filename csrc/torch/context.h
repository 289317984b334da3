// Helpers every glue file uses: the ember device and stream a tensor lives on, the core view of
// an at::Tensor, and enqueueing a kernel on the current stream.
#pragma once

#include <ATen/ATen.h>

#include "kernels/tensor_view.h"
#include "runtime/device.h"

namespace ember::torch_glue {

// Device index of an ember tensor (or the current device for -1).
runtime::Device& device_for(c10::DeviceIndex index);
runtime::Device& tensor_device(const at::Tensor& t);
runtime::Stream& current_stream_of(const at::Tensor& t);

// The core element type for a ScalarType; raises a clear error for types the device lacks.
kernels::DType to_dtype(c10::ScalarType t);
bool has_dtype(c10::ScalarType t);  // ember kernels compute it
bool storage_only_dtype(c10::ScalarType t);  // held and copied, computed through the CPU fallback
bool storable_dtype(c10::ScalarType t);  // either
// A tensor as a kernel argument. view_of is for tensors a kernel writes (their storage is made
// writable: a copy-on-write storage is copied first); view_in for tensors it only reads, which
// leaves a copy-on-write (torch._lazy_clone) storage shared, as CPU and CUDA kernels do. A
// kernel must never write through a view_in.
kernels::TensorView view_of(const at::Tensor& t);
kernels::TensorView view_in(const at::Tensor& t);

// Queues `task` on `stream` under `name` (a literal or dispatcher-owned string); raises the
// task's error at once in EMBER_SYNC=1 mode.
//
// A task must not own tensors: it is destroyed on the stream's worker, and dropping the last
// reference to a tensor Python also holds would take the GIL there (and abort at interpreter
// exit). Nor does it need to: the caching allocator reuses a freed block only for work queued
// later on the same stream, so temporaries may be released as soon as the task is queued.
uint64_t enqueue(runtime::Stream& stream, const char* name, runtime::Task task);

// Waits for `stream` and raises any error stored on it (a synchronizing call).
void synchronize(runtime::Stream& stream);

// Releases the GIL for a host wait on the device, if this thread holds it. Work a stream waits
// for may need Python to finish (a collective the distributed communication thread carries,
// torch_ember/distributed/comm.py), and some callers reach a synchronizing op with the GIL held
// (DTensor's C++ dispatch runs local ops under it): waiting with the GIL would deadlock.
class WithoutGil {
  public:
    WithoutGil();
    ~WithoutGil();
    WithoutGil(const WithoutGil&) = delete;
    WithoutGil& operator=(const WithoutGil&) = delete;

  private:
    void* state_ = nullptr;  // the PyThreadState saved while released
};

// Whether `t` is undefined or on `device`. Native kernels read raw pointers, so an argument on
// another device must never reach them: glue sends such calls to the fallback, which raises
// PyTorch's "Expected all tensors to be on the same device".
inline bool on_device(const c10::Device& device, const at::Tensor& t) { return !t.defined() || t.device() == device; }
inline bool on_device(const c10::Device& device, const std::optional<at::Tensor>& t) {
    return !t || on_device(device, *t);
}

// Counts bytes that crossed between host and device while a fallback op runs (fallback.cc).
void note_transfer(size_t bytes, bool to_host);

}  // namespace ember::torch_glue
