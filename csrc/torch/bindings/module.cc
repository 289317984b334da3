// torch_ember._C: the only Python binding file. Everything here is a thin call into core or the
// glue; Python-facing behaviour (argument defaults, device parsing) lives in python/torch_ember.
#include <ATen/ops/ones.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../check.h"
#include "../context.h"
#include "../extension_api.h"
#include "../fallback.h"
#include "../generator.h"
#include "../graph_capture.h"
#include "../profiler_bridge.h"
#include "base/env.h"
#include "kernels/gemm/gemm.h"
#include "runtime/device.h"
#include "runtime/host_signal.h"

namespace py = pybind11;
using namespace ember;

namespace ember::torch_glue {
void bind_compiler(py::module_& m);  // bindings/compiler.cc
}

namespace {

runtime::Device& dev(int index) { return torch_glue::device_for(static_cast<c10::DeviceIndex>(index)); }

py::dict stat_dict(const runtime::Stat& s) {
    py::dict d;
    d["current"] = s.current;
    d["peak"] = s.peak;
    d["allocated"] = s.allocated;
    d["freed"] = s.freed;
    return d;
}

// The innermost Python frame outside torch and torch_ember, as "file:line"; "" when this thread
// is not running Python (autograd's backward threads, stream workers). PyTorch releases the GIL
// around op calls, so it is taken back here for the frame walk.
std::string frame_walk();

std::string user_source_line() {
    if (PyGILState_Check()) return frame_walk();
    if (PyGILState_GetThisThreadState() == nullptr) return {};  // never ran Python
    PyGILState_STATE g = PyGILState_Ensure();
    std::string out = frame_walk();
    PyGILState_Release(g);
    return out;
}

std::string frame_walk() {
    PyFrameObject* frame = PyEval_GetFrame();  // borrowed
    if (frame) Py_INCREF(frame);
    std::string out;
    while (frame != nullptr) {
        PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
        const char* file = PyUnicode_AsUTF8(code->co_filename);
        std::string_view f = file ? file : "";
        // "<frozen ...>" is the interpreter's own code; "<string>", "<stdin>" and notebook
        // cells are the user's.
        bool library = f.empty() || f.starts_with("<frozen") || f.find("/torch/") != std::string_view::npos ||
                       f.find("/torch_ember/") != std::string_view::npos;
        if (!library) out = std::string(f) + ":" + std::to_string(PyFrame_GetLineNumber(frame));
        Py_DECREF(code);
        PyFrameObject* back = library ? PyFrame_GetBack(frame) : nullptr;  // new reference
        Py_DECREF(frame);
        frame = back;
    }
    if (PyErr_Occurred()) PyErr_Clear();
    return out;
}

py::list records_to_python(const profiler::Trace& trace) {
    py::list out;
    for (const profiler::Record& r : trace.records) {
        py::dict d;
        d["kind"] = profiler::kind_name(r.kind);
        d["ts_ns"] = r.ts_ns;
        d["dur_ns"] = r.dur_ns;
        d["device"] = r.device;
        d["stream"] = r.stream;
        d["seq"] = r.seq;
        d["name"] = trace.str(r.name);
        d["thread"] = r.thread;
        d["ptr"] = r.ptr;
        d["bytes"] = r.bytes;
        d["bytes_to_device"] = r.bytes_to_device;
        d["allocated"] = r.allocated;
        d["reserved"] = r.reserved;
        d["shapes"] = trace.str(r.shapes);
        d["source"] = trace.str(r.source);
        d["event_id"] = r.event_id;
        d["cache_hit"] = r.cache_hit;
        d["copy_kind"] = profiler::copy_kind_name(r.copy_kind);
        out.append(std::move(d));
    }
    return out;
}

// PyTorch's autograd engine runs a backward's ember nodes on one thread per ember device, and
// that thread may drop its reference to the finished GraphTask after the caller has already
// returned. The GraphTask's saved thread-local state holds Python objects (backward() stashes a
// contextvars context there), so the drop takes the GIL; if the interpreter has begun to shut
// down by then, the thread is torn down inside a destructor and the process aborts. A small
// backward through every ember device, run from a fresh thread that carries no Python state,
// cannot finish before each device thread has released everything it held before.
void drain_autograd_threads() {
    std::thread([] {
        for (int i = 0; i < runtime::device_count(); ++i) {
            // Best effort, device by device: an exception escaping this thread would abort the
            // process, and a device left full (a run that ended on an out-of-memory error) cannot
            // hold even these few bytes.
            try {
                c10::Device d(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(i));
                at::Tensor x = at::ones({1}, at::TensorOptions().device(d)).requires_grad_(true);
                torch::autograd::backward({(x * 2).sum()});
            } catch (const std::exception&) {
            }
        }
    }).join();
}

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "Ember runtime bindings";
    m.attr("api_version") = runtime::kApiVersion;

    m.def("_device_count", [] { return runtime::device_count(); });
    m.def("_get_device", [] { return runtime::current_device(); });
    m.def("_is_in_bad_fork", [] { return runtime::forked_after_use(); });
    m.def("_set_device", [](int index) {
        torch_glue::value_or_raise(runtime::checked_device(index));
        runtime::set_current_device(index);
    });
    m.def("_synchronize", [](int index) {
        py::gil_scoped_release no_gil;
        EMBER_CHECK(dev(index).synchronize());
    });
    m.def("_drain_autograd_threads", [] {
        py::gil_scoped_release no_gil;
        drain_autograd_threads();
    });
    // The float32 block product (kernels::block_sgemm) that translated Triton kernels call for tl.dot.
    m.def("_block_sgemm_address", [] { return reinterpret_cast<uintptr_t>(kernels::block_sgemm()); });
    m.def("_num_threads", [](int index) { return dev(index).pool().num_threads(); });
    m.def("_device_memory_capacity", [](int index) { return dev(index).allocator().capacity(); });
    m.def("_memory_summary", [](int index) { return dev(index).allocator().summary(); });
    m.def("_memory_pool_stats", [](int index) {
        runtime::MemoryStats s = dev(index).allocator().stats();
        py::dict d;
        d["allocated_bytes"] = stat_dict(s.allocated_bytes[runtime::kAllPools]);
        d["reserved_bytes"] = stat_dict(s.reserved_bytes[runtime::kAllPools]);
        return d;
    });
    m.def("_host_memory_stats", [] {
        py::dict d;
        d["allocated_bytes"] = runtime::host_allocator().allocated_bytes();
        d["cached_bytes"] = runtime::host_allocator().cached_bytes();
        return d;
    });
    m.def("_empty_host_cache", [] { runtime::host_allocator().empty_cache(); });

    m.def("_get_default_generator", [](int index) {
        return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(
            torch_glue::default_generator(static_cast<c10::DeviceIndex>(index))));
    });

    m.def("_sync_mode", [] { return env::sync_mode(); });
    m.def("_set_sync_mode", [](bool on) { env::set_sync_mode(on); });

    // Queues a kernel that sleeps on the current stream: for tests and benchmarks of
    // asynchrony, like torch.cuda._sleep.
    m.def("_sleep", [](int index, double ms) {
        torch_glue::enqueue(dev(index).current_stream(), "sleep", [ms] {
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
            return Status();
        });
    });
    // A one-shot flag the host sets and a stream waits for (runtime/host_signal.h): how a
    // collective that the host carries over Gloo takes its place in a stream's order
    // (torch_ember/distributed/comm.py). The wait is queued with the GIL released, because with
    // EMBER_SYNC=1 it runs on the calling thread until a Python thread sets the flag.
    py::class_<runtime::HostSignal, std::shared_ptr<runtime::HostSignal>>(m, "_HostSignal")
        .def(py::init<>())
        .def("set", [](runtime::HostSignal& s, std::string error) { s.set(std::move(error)); },
             py::arg("error") = "")
        .def("is_set", &runtime::HostSignal::is_set)
        .def("enqueue_wait", [](std::shared_ptr<runtime::HostSignal> s, int index, int64_t stream_id,
                                const std::string& what, double timeout_s) {
            runtime::Stream& stream = *torch_glue::value_or_raise(dev(index).stream(stream_id));
            const char* name = torch_glue::interned(what);
            auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
            py::gil_scoped_release no_gil;
            torch_glue::enqueue(stream, name, [s, name, timeout] { return s->wait(timeout, name); });
        });
    // Queues a host-compiled kernel on a stream: a Triton kernel's `ember_launch(args, gx, gy,
    // gz, threads)` (torch_ember/triton/driver.py). `args` holds one 8-byte slot per kernel
    // argument (a pointer or a little-endian scalar) and is copied into the task, so the launch
    // may run after the caller's values are gone; the task is named after the kernel, so a fault
    // and a trace name it.
    m.def("_enqueue_launch", [](int index, int64_t stream_id, const std::string& name, uintptr_t fn,
                                py::bytes args, int64_t gx, int64_t gy, int64_t gz, int threads) {
        runtime::Stream& stream = *torch_glue::value_or_raise(dev(index).stream(stream_id));
        const char* label = torch_glue::interned(name);
        std::string blob = args;
        using Launch = void (*)(void**, int64_t, int64_t, int64_t, int);
        auto launch = reinterpret_cast<Launch>(fn);
        py::gil_scoped_release no_gil;
        torch_glue::enqueue(stream, label, [blob = std::move(blob), launch, gx, gy, gz, threads]() mutable {
            std::vector<void*> slots(std::max<size_t>(1, blob.size() / 8));
            for (size_t i = 0; i < blob.size() / 8; ++i) slots[i] = blob.data() + 8 * i;
            launch(slots.data(), gx, gy, gz, threads);
            return Status();
        });
    });
    // The C ABI table of ahead-of-time C++ extensions (torch_ember/include/torch_ember/extension.h).
    m.attr("_extension_api") = py::capsule(static_cast<const void*>(&torch_glue::extension_api()),
                                           "torch_ember._C._extension_api");
    // Queues `n` empty kernels: the host cost of an enqueue, for bench/.
    m.def("_enqueue_empty", [](int index, int n) {
        runtime::Stream& s = dev(index).current_stream();
        for (int i = 0; i < n; ++i) torch_glue::enqueue(s, "empty", [] { return Status(); });
    });

    // Core allocator alloc+free pairs, without the dispatcher: nanoseconds per pair, for bench/.
    m.def("_bench_alloc_free", [](int index, size_t bytes, int iters) {
        runtime::Device& d = dev(index);
        runtime::Stream& s = d.current_stream();
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
            void* p = torch_glue::value_or_raise(d.allocator().allocate(bytes, s));
            d.allocator().free(p);
        }
        std::chrono::duration<double, std::nano> ns = std::chrono::steady_clock::now() - start;
        return ns.count() / iters;
    });

    // torch.ember.EmberGraph's core (graph_capture.h).
    py::class_<torch_glue::GraphCapture>(m, "_CapturedGraph")
        .def(py::init<>())
        .def("capture_begin", &torch_glue::GraphCapture::capture_begin)
        .def("capture_end", &torch_glue::GraphCapture::capture_end)
        .def("replay", &torch_glue::GraphCapture::replay, py::call_guard<py::gil_scoped_release>())
        .def("reset", &torch_glue::GraphCapture::reset, py::call_guard<py::gil_scoped_release>())
        .def("num_kernels", &torch_glue::GraphCapture::num_kernels)
        .def("capturing", &torch_glue::GraphCapture::capturing);
    m.def("_any_capture", [] { return torch_glue::any_capture(); });
    m.def("_is_capturing", [](int index) {
        runtime::Device& d = dev(index);
        return d.capture_stream() != nullptr && d.capture_stream() == &d.current_stream();
    });

    torch_glue::bind_compiler(m);
    torch_glue::set_source_provider(&user_source_line);
    m.def("_profiler_start", [](bool record_shapes, bool with_stack, bool host_ops) {
        torch_glue::ProfilerOptions o;
        o.record_shapes = record_shapes;
        o.with_stack = with_stack;
        o.host_ops = host_ops;
        py::gil_scoped_release release;
        torch_glue::profiler_start(o);
    });
    m.def("_profiler_stop", [] {
        profiler::Trace trace;
        {
            py::gil_scoped_release release;
            trace = torch_glue::profiler_stop();
        }
        return records_to_python(trace);
    });
    m.def("_profiler_running", [] { return torch_glue::profiler_running(); });

    m.def("_fallback_records", [] {
        py::list out;
        for (const auto& r : torch_glue::fallback_records()) {
            out.append(py::make_tuple(r.op, r.calls, r.bytes_to_host, r.bytes_to_device, r.seconds));
        }
        return out;
    });
    m.def("_reset_fallback_records", [] { torch_glue::reset_fallback_records(); });
    // Runs `aten::name.overload` through the visible CPU fallback (counted, warned, refused in
    // error mode), for Python kernels that hand some inputs to the CPU as C++ kernels do.
    m.def("_cpu_fallback", [](const std::string& name, const std::string& overload, py::args args,
                              const py::kwargs& kwargs) {
        auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
        torch::jit::Stack stack =
            torch::jit::createStackForSchema(op.schema(), torch::jit::tuple_slice(std::move(args)), kwargs, std::nullopt);
        {
            py::gil_scoped_release release;
            torch_glue::ember_cpu_fallback(op, &stack);
        }
        return torch::jit::createPyObjectForStack(std::move(stack));
    });
    m.def("_get_fallback_mode", [] {
        switch (torch_glue::fallback_mode()) {
            case torch_glue::FallbackMode::kSilent: return "silent";
            case torch_glue::FallbackMode::kError: return "error";
            default: return "warn";
        }
    });
    m.def("_set_fallback_mode", [](const std::string& mode) {
        if (mode == "warn") torch_glue::set_fallback_mode(torch_glue::FallbackMode::kWarn);
        else if (mode == "silent") torch_glue::set_fallback_mode(torch_glue::FallbackMode::kSilent);
        else if (mode == "error") torch_glue::set_fallback_mode(torch_glue::FallbackMode::kError);
        else throw py::value_error("fallback mode must be 'warn', 'silent' or 'error', got '" + mode + "'");
    });
}
