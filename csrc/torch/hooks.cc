// PrivateUse1HooksInterface: what ATen asks of the backend outside any op — availability,
// generators, pinned memory, pointer ownership and storage resizing.
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "allocator.h"
#include "check.h"
#include "context.h"
#include "generator.h"

namespace ember::torch_glue {
namespace {

struct Hooks final : public at::PrivateUse1HooksInterface {
    bool isBuilt() const override { return true; }
    bool isAvailable() const override { return runtime::device_count() > 0; }
    bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
    c10::DeviceIndex deviceCount() const override {
        return static_cast<c10::DeviceIndex>(runtime::device_count());
    }
    void setCurrentDevice(c10::DeviceIndex d) const override {
        value_or_raise(runtime::checked_device(d));
        runtime::set_current_device(d);
    }
    c10::DeviceIndex getCurrentDevice() const override {
        return static_cast<c10::DeviceIndex>(runtime::current_device());
    }
    c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
        auto old = getCurrentDevice();
        setCurrentDevice(d);
        return old;
    }
    c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }

    const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
        return default_generator(index);
    }
    at::Generator getNewGenerator(c10::DeviceIndex index) const override {
        int i = index < 0 ? runtime::current_device() : index;
        return at::make_generator<EmberGenerator>(static_cast<c10::DeviceIndex>(i));
    }
    at::Device getDeviceFromPtr(void* data) const override {
        int dev = runtime::device_of(data);
        TORCH_CHECK(dev >= 0, "ember: pointer ", data, " is not ember device memory");
        return {c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(dev)};
    }
    bool isPinnedPtr(const void* data) const override {
        return data != nullptr && runtime::host_allocator().is_pinned(data);
    }
    at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
    void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
        resize_storage_bytes(storage, new_bytes);
    }
};

// Registered at load time: ATen may ask for hooks before Python finishes importing the package.
struct Registrar {
    Registrar() { at::RegisterPrivateUse1HooksInterface(new Hooks()); }
} g_registrar;

}  // namespace
}  // namespace ember::torch_glue
