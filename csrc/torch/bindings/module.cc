// torch_ember._C: the only Python binding file. Everything here is a thin call into core or the
// glue; Python-facing behaviour (argument defaults, device parsing) lives in python/torch_ember.
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <thread>

#include "../check.h"
#include "../context.h"
#include "../fallback.h"
#include "../generator.h"
#include "base/env.h"
#include "runtime/device.h"

namespace py = pybind11;
using namespace ember;

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

}  // namespace

PYBIND11_MODULE(_C, m) {
    m.doc() = "Ember runtime bindings";
    m.attr("api_version") = runtime::kApiVersion;

    m.def("_device_count", [] { return runtime::device_count(); });
    m.def("_get_device", [] { return runtime::current_device(); });
    m.def("_set_device", [](int index) {
        torch_glue::value_or_raise(runtime::checked_device(index));
        runtime::set_current_device(index);
    });
    m.def("_synchronize", [](int index) {
        py::gil_scoped_release no_gil;
        EMBER_CHECK(dev(index).synchronize());
    });
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

    m.def("_fallback_records", [] {
        py::list out;
        for (const auto& r : torch_glue::fallback_records()) {
            out.append(py::make_tuple(r.op, r.calls, r.bytes_to_host, r.bytes_to_device, r.seconds));
        }
        return out;
    });
    m.def("_reset_fallback_records", [] { torch_glue::reset_fallback_records(); });
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
