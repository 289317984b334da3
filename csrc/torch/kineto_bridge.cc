// torch.profiler integration: a Kineto activity profiler for the PrivateUse1 activity, so
// `torch.profiler.profile(activities=[CPU, PrivateUse1])` shows each ember kernel and queued
// copy, on its device and stream, next to PyTorch's own CPU op events. PyTorch records the op
// calls itself; this session records only what ran on the devices (profiler_bridge's tracer
// without host ops) and hands it to Kineto as activities when the trace is processed.
#include <memory>

// Kineto declares getTraceBuffer() with its CpuTraceBuffer but does not ship that type's
// definition. This session never hands over a buffer (it logs its activities in
// processTrace), so the only pointer ever destroyed here is null: a deleter that needs no
// complete type is enough. Declared before Kineto's headers use the type.
namespace libkineto {
struct CpuTraceBuffer;
}
template <>
struct std::default_delete<libkineto::CpuTraceBuffer> {
    void operator()(libkineto::CpuTraceBuffer*) const noexcept {}
};

#include <kineto/GenericTraceActivity.h>
#include <kineto/IActivityProfiler.h>
#include <kineto/output_base.h>
#include <kineto/time_since_epoch.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <chrono>
#include <deque>
#include <map>
#include <tuple>
#include <vector>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "profiler_bridge.h"

namespace ember::torch_glue {
namespace {

using libkineto::ActivityType;

// Activities keep a pointer to their TraceSpan, and Kineto may log them after the session is
// gone: spans live for the process.
const libkineto::TraceSpan& keep_span(int64_t start, int64_t end) {
    static std::mutex mu;
    static auto* spans = new std::deque<libkineto::TraceSpan>();
    std::lock_guard<std::mutex> lock(mu);
    return spans->emplace_back(start, end, "ember");
}

int64_t unix_now_ns() { return libkineto::timeSinceEpoch(std::chrono::system_clock::now()); }

class EmberSession final : public libkineto::IActivityProfilerSession {
  public:
    void start() override {
        ProfilerOptions o;
        o.host_ops = false;
        profiler_start(o);
        // The tracer counts from its start; Kineto wants Unix-epoch nanoseconds.
        origin_ = unix_now_ns() - tracer()->now_ns();
        status_ = libkineto::TraceStatus::RECORDING;
    }

    void stop() override {
        if (profiler_running()) trace_ = profiler_stop();
        end_ = unix_now_ns();
        status_ = libkineto::TraceStatus::PROCESSING;
    }

    std::vector<std::string> errors() override { return {}; }

    // Called on the host thread around each op PyTorch records: enqueues made meanwhile carry
    // the id, which links their kernels to the op.
    void pushCorrelationId(uint64_t id) override {
        correlation_stack().push_back(id);
        profiler::Tracer::set_correlation(id);
    }
    void popCorrelationId() override {
        auto& s = correlation_stack();
        if (!s.empty()) s.pop_back();
        profiler::Tracer::set_correlation(s.empty() ? 0 : s.back());
    }

    void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                      int64_t, int64_t) override {
        linked_ = std::move(linked);
        processTrace(logger);
        linked_ = nullptr;
    }

    void processTrace(libkineto::ActivityLogger& logger) override {
        const libkineto::TraceSpan& span = keep_span(origin_, end_);
        std::map<std::tuple<int, int64_t, uint64_t>, uint64_t> correlation;
        for (const profiler::Record& r : trace_.records) {
            if (r.kind == profiler::RecordKind::kEnqueue && r.event_id != 0)
                correlation[{r.device, r.stream, r.seq}] = r.event_id;
        }
        for (const profiler::Record& r : trace_.records) {
            const bool kernel = r.kind == profiler::RecordKind::kKernel;
            const bool copy = r.kind == profiler::RecordKind::kCopy && r.dur_ns > 0;
            if (!kernel && !copy) continue;
            libkineto::GenericTraceActivity act(span, kernel ? ActivityType::CONCURRENT_KERNEL : ActivityType::GPU_MEMCPY,
                                                kernel ? trace_.str(r.name) : std::string("Memcpy ") + profiler::copy_kind_name(r.copy_kind));
            act.startTime = origin_ + r.ts_ns;
            act.endTime = act.startTime + r.dur_ns;
            act.device = r.device < 0 ? 0 : r.device;
            act.resource = static_cast<int32_t>(r.stream < 0 ? 0 : r.stream);
            act.threadId = r.thread;
            act.id = static_cast<int32_t>(r.seq);
            auto c = correlation.find({r.device, r.stream, r.seq});
            if (c != correlation.end() && linked_) act.linked = linked_(static_cast<int32_t>(c->second));
            act.addMetadata("device", r.device);
            act.addMetadata("stream", r.stream);
            if (copy) act.addMetadata("bytes", r.bytes);
            logger.handleGenericActivity(act);
        }
        trace_ = {};
    }

    std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
        return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "ember", "ember"});
    }
    std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
    std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  private:
    static std::vector<uint64_t>& correlation_stack() {
        thread_local std::vector<uint64_t> stack;
        return stack;
    }

    profiler::Trace trace_;
    libkineto::getLinkedActivityCallback linked_;
    int64_t origin_ = 0;
    int64_t end_ = 0;
};

class EmberActivityProfiler final : public libkineto::IActivityProfiler {
  public:
    const std::string& name() const override { return name_; }
    const std::set<ActivityType>& availableActivities() const override { return activities_; }

    std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<ActivityType>& types,
                                                                   const libkineto::Config&) override {
        for (ActivityType t : types) {
            if (activities_.count(t)) return std::make_unique<EmberSession>();
        }
        return nullptr;
    }
    std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t, int64_t,
                                                                   const std::set<ActivityType>& types,
                                                                   const libkineto::Config& config) override {
        return configure(types, config);
    }

  private:
    std::string name_ = "ember";
    std::set<ActivityType> activities_ = {ActivityType::PRIVATEUSE1_RUNTIME, ActivityType::PRIVATEUSE1_DRIVER,
                                          ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY};
};

REGISTER_PRIVATEUSE1_PROFILER(EmberActivityProfiler);

}  // namespace
}  // namespace ember::torch_glue
