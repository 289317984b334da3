#include "runtime/host_signal.h"

namespace ember::runtime {

void HostSignal::set(std::string error) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (set_) return;
        set_ = true;
        error_ = std::move(error);
    }
    cv_.notify_all();
}

bool HostSignal::is_set() const {
    std::lock_guard<std::mutex> lock(mu_);
    return set_;
}

Status HostSignal::wait(std::chrono::milliseconds timeout, const std::string& what) const {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return set_; })) {
        return {StatusCode::kKernelFailed,
                what + ": the host did not finish within " + std::to_string(timeout.count() / 1000.0) +
                    " s"};
    }
    if (!error_.empty()) return {StatusCode::kKernelFailed, error_};
    return Status();
}

}  // namespace ember::runtime
