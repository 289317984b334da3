#include "extension_api.h"

#include <cstdio>
#include <exception>
#include <mutex>
#include <set>
#include <string>

#include "context.h"

namespace ember::torch_glue {
namespace {

int enqueue_task(int device, const char* name, ember_ext_task task, void* ctx, ember_ext_drop drop, char* err,
                 size_t err_len) {
    try {
        runtime::Stream& stream = device_for(static_cast<c10::DeviceIndex>(device)).current_stream();
        const char* label = interned(name ? name : "extension kernel");
        enqueue(stream, label, [task, ctx, drop, label] {
            char msg[512] = {0};
            task(ctx, msg, sizeof(msg));
            drop(ctx);
            if (msg[0] != '\0') return Status(StatusCode::kKernelFailed, std::string(label) + ": " + msg);
            return Status();
        });
        return 0;
    } catch (const std::exception& e) {
        std::snprintf(err, err_len, "%s", e.what());
        return 1;
    }
}

void parallel_range(int device, int64_t n, int64_t grain, ember_ext_range body, void* ctx) {
    device_for(static_cast<c10::DeviceIndex>(device)).pool().parallel_for(
        n, grain, [body, ctx](int64_t lo, int64_t hi) { body(ctx, lo, hi); });
}

int threads(int device) { return device_for(static_cast<c10::DeviceIndex>(device)).pool().num_threads(); }

}  // namespace

const char* interned(const std::string& name) {
    static std::mutex mu;
    static std::set<std::string> names;
    std::lock_guard<std::mutex> lock(mu);
    return names.insert(name).first->c_str();
}

const EmberExtensionApi& extension_api() {
    static const EmberExtensionApi table = {EMBER_EXTENSION_API_VERSION, enqueue_task, parallel_range, threads};
    return table;
}

}  // namespace ember::torch_glue
