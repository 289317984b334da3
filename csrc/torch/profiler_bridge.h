// The glue's side of the profiler: one process-wide core Tracer at a time, fed by the runtime's
// instrumentation hooks (kernels, allocations) and by the glue itself (op calls through
// PyTorch's RecordFunction, copies, fallbacks, events, synchronizes). Started and stopped by
// torch_ember.profiler.profile (bindings) or by torch.profiler through the Kineto plugin
// (kineto_bridge.cc).
#pragma once

#include <string>

#include "profiler/tracer.h"

namespace ember::torch_glue {

// The running tracer, or nullptr: one relaxed atomic load, so every hook can ask cheaply.
profiler::Tracer* tracer();

struct ProfilerOptions {
    bool host_ops = true;       // record op calls (RecordFunction); off under torch.profiler,
                                // which records them itself
    bool record_shapes = false; // input shapes and dtypes of each op call
    bool with_stack = false;    // the user's Python file:line of each op call
};

// Starts a trace; fails with a clear error if one is already running. Waits for the devices
// first, so that the trace starts from an idle device.
void profiler_start(const ProfilerOptions& options);
// Waits for the devices, stops, and returns everything recorded. The tracer stays alive (a
// straggling hook may still hold it) until a later trace replaces it.
profiler::Trace profiler_stop();
bool profiler_running();

// Supplies the user's source line for an op call ("" when the caller is not Python). Installed
// by the bindings, the only file that talks to the interpreter.
using SourceProvider = std::string (*)();
void set_source_provider(SourceProvider provider);

// Times a host span and reports it as a copy when the tracer is on (a synchronous transfer).
class CopySpan {
  public:
    CopySpan(profiler::CopyKind kind, uint64_t bytes, int device, int64_t stream);
    ~CopySpan();

  private:
    profiler::Tracer* tracer_;
    profiler::CopyKind kind_;
    uint64_t bytes_;
    int device_;
    int64_t stream_;
    int64_t start_ = 0;
};

}  // namespace ember::torch_glue
