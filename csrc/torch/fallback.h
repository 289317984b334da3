// The visible CPU fallback: an op without an Ember kernel runs on the CPU with its inputs
// copied to the host and its results copied back. Every such run is counted per op (calls,
// bytes each way, time); EMBER_FALLBACK=warn (default) warns once per op, =silent only counts,
// =error refuses.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace ember::torch_glue {

enum class FallbackMode { kWarn, kSilent, kError };

struct FallbackRecord {
    std::string op;
    int64_t calls = 0;
    int64_t bytes_to_host = 0;
    int64_t bytes_to_device = 0;
    double seconds = 0;
};

// The boxed fallback itself, for kernels that hand some inputs (e.g. integer dtypes) over to it
// with at::native::call_fallback_fn.
void ember_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// A library op (library_ops.cc): the CPU kernel, i.e. the host's LAPACK or FFT library, run on
// the device memory itself once the current stream has finished, its inputs aliased rather than
// copied; not counted or warned as a fallback. Written arguments and results are copied.
void ember_library_call(const c10::OperatorHandle& op, torch::jit::Stack* stack);

FallbackMode fallback_mode();
void set_fallback_mode(FallbackMode mode);
std::vector<FallbackRecord> fallback_records();
void reset_fallback_records();

// One run of an op on the CPU on behalf of the device. Construction applies the mode (raises in
// error mode, warns once in warn mode); while alive, host<->device copies on this thread are
// counted for `op`; destruction after success records the call. Used by the boxed fallback and
// by kernels that delegate to the CPU explicitly (e.g. convolution until it has a native kernel).
class FallbackScope {
  public:
    explicit FallbackScope(std::string op);
    ~FallbackScope();
    FallbackScope(const FallbackScope&) = delete;
    FallbackScope& operator=(const FallbackScope&) = delete;

    void add_transfer(size_t bytes, bool to_host);

  private:
    std::string op_;
    FallbackScope* outer_;
    int64_t to_host_ = 0;
    int64_t to_device_ = 0;
    int uncaught_;
    std::chrono::steady_clock::time_point start_;
};

}  // namespace ember::torch_glue
