// DeviceGuardImplInterface for PrivateUse1: current device, streams and events, all mapped onto
// core's runtime. torch.Stream, torch.Event and torch.accelerator route through here.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "check.h"
#include "context.h"
#include "profiler_bridge.h"
#include "runtime/event.h"

namespace ember::torch_glue {
namespace {

using c10::Device;
using c10::DeviceIndex;
using c10::DeviceType;
using c10::Stream;

Stream to_c10(const runtime::Stream& s) {
    return Stream(Stream::UNSAFE, Device(DeviceType::PrivateUse1, static_cast<DeviceIndex>(s.device())),
                  s.id());
}

runtime::Stream& from_c10(const Stream& s) {
    return *value_or_raise(device_for(s.device_index()).stream(s.id()));
}

runtime::Event* as_event(void* e) { return static_cast<runtime::Event*>(e); }

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
    DeviceType type() const override { return DeviceType::PrivateUse1; }

    Device exchangeDevice(Device d) const override {
        Device old = getDevice();
        if (old.index() != d.index()) setDevice(d);
        return old;
    }
    Device getDevice() const override {
        return Device(DeviceType::PrivateUse1, static_cast<DeviceIndex>(runtime::current_device()));
    }
    void setDevice(Device d) const override {
        TORCH_CHECK(d.type() == DeviceType::PrivateUse1, "ember: expected an ember device, got ", d);
        value_or_raise(runtime::checked_device(d.index()));
        runtime::set_current_device(d.index());
    }
    void uncheckedSetDevice(Device d) const noexcept override {
        if (d.index() >= 0 && d.index() < runtime::device_count()) runtime::set_current_device(d.index());
    }
    DeviceIndex deviceCount() const noexcept override {
        return static_cast<DeviceIndex>(runtime::device_count());
    }

    Stream getStream(Device d) const override { return to_c10(device_for(d.index()).current_stream()); }
    Stream getDefaultStream(Device d) const override {
        return to_c10(device_for(d.index()).default_stream());
    }
    Stream getNewStream(Device d, int priority) const override {
        return to_c10(device_for(d.index()).create_stream(priority));
    }
    Stream getStreamFromGlobalPool(Device d, bool high_priority) const override {
        return to_c10(device_for(d.index()).create_stream(high_priority ? -1 : 0));
    }
    Stream exchangeStream(Stream s) const override {
        runtime::Device& dev = device_for(s.device_index());
        Stream old = to_c10(dev.current_stream());
        dev.set_current_stream(from_c10(s));
        return old;
    }
    bool queryStream(const Stream& s) const override { return from_c10(s).query(); }
    bool isStreamCapturing(const Stream& s) const override { return from_c10(s).capturing(); }
    void synchronizeStream(const Stream& s) const override { synchronize(from_c10(s)); }
    void synchronizeDevice(DeviceIndex index) const override {
        runtime::Device& dev = device_for(index);
        profiler::Tracer* t = tracer();
        if (t) t->synchronize_begin(dev.index());
        Status st;
        {
            WithoutGil no_gil;
            st = dev.synchronize();
        }
        if (t) t->synchronize_end(dev.index());
        EMBER_CHECK(st);
    }

    void record(void** event, const Stream& s, const DeviceIndex device_index,
                const c10::EventFlag flag) const override {
        TORCH_CHECK(device_index == -1 || device_index == s.device_index(),
                    "ember: event device ", static_cast<int>(device_index), " does not match the stream's device ",
                    static_cast<int>(s.device_index()));
        if (*event == nullptr) *event = new runtime::Event(flag == c10::EventFlag::BACKEND_DEFAULT);
        runtime::Stream& stream = from_c10(s);
        EMBER_CHECK(as_event(*event)->record(stream));
        if (profiler::Tracer* t = tracer()) {
            t->event_record(stream.device(), stream.id(), reinterpret_cast<uintptr_t>(*event), stream.enqueued());
        }
    }
    void block(void* event, const Stream& s) const override {
        if (event == nullptr) return;
        runtime::Stream& stream = from_c10(s);
        EMBER_CHECK(as_event(event)->block(stream));
        if (profiler::Tracer* t = tracer()) {
            t->event_wait(stream.device(), stream.id(), reinterpret_cast<uintptr_t>(event), stream.enqueued());
        }
    }
    bool queryEvent(void* event) const override { return event == nullptr || as_event(event)->query(); }
    void synchronizeEvent(void* event) const override {
        if (event == nullptr) return;
        profiler::Tracer* t = tracer();
        if (t) t->synchronize_begin(as_event(event)->device());
        Status st;
        {
            WithoutGil no_gil;
            st = as_event(event)->synchronize();
        }
        if (t) t->synchronize_end(as_event(event)->device());
        EMBER_CHECK(st);
    }
    void destroyEvent(void* event, const DeviceIndex) const noexcept override {
        delete as_event(event);
    }
    double elapsedTime(void* start, void* end, const DeviceIndex) const override {
        TORCH_CHECK(start != nullptr && end != nullptr,
                    "ember: elapsed_time needs both events to be recorded first");
        return value_or_raise(as_event(start)->elapsed_ms(*as_event(end)));
    }
    // torch.accelerator.get_device_capability(): the dtypes ember tensors can hold.
    c10::DeviceCapability getDeviceCapability(Device) const override {
        c10::DeviceCapability cap;  // starts with every dtype set
#define EMBER_KEEP_DTYPE(_, name) \
    cap.capability_data.supported_scalar_types.has_##name = storable_dtype(c10::ScalarType::name);
        AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(EMBER_KEEP_DTYPE)
#undef EMBER_KEEP_DTYPE
        return cap;
    }
    void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const Stream& s) const override {
        int owner = runtime::device_of(data_ptr.get());
        if (owner >= 0) runtime::device(owner).allocator().record_stream(data_ptr.get(), from_c10(s));
    }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, GuardImpl);

}  // namespace ember::torch_glue
