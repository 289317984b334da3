#include "runtime/event.h"

#include <chrono>
#include <string>

namespace ember::runtime {

Event::Event(bool enable_timing) : timing_(enable_timing) {}

int Event::device() const { return state_ ? state_->stream->device() : -1; }

Status Event::record(Stream& stream) {
    auto state = std::make_shared<State>();
    state->stream = &stream;
    if (timing_) {
        // The marker task runs when the stream reaches it; that moment is the event's time.
        auto seq = stream.enqueue("event_record", [state] {
            state->time_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count(),
                                 std::memory_order_release);
            return Status();
        });
        if (!seq.ok()) return seq.status();
        state->seq = *seq;
    } else {
        state->seq = stream.enqueued();
    }
    state_ = std::move(state);
    return Status();
}

Status Event::block(Stream& stream) const {
    if (!state_ || state_->stream == &stream) return Status();  // same stream is already ordered
    auto state = state_;
    auto seq = stream.enqueue("event_wait", [state] {
        state->stream->wait_for(state->seq);
        // Work this stream now depends on failed: the failure becomes this stream's too, so its
        // next synchronizing call reports it instead of handing on what the failed kernel left
        // in memory (a CUDA device error is sticky the same way).
        return state->stream->peek_error();
    });
    return seq.ok() ? Status() : seq.status();
}

bool Event::query() const { return !state_ || state_->stream->is_done(state_->seq); }

Status Event::synchronize() const {
    if (!state_) return Status();
    state_->stream->wait_for(state_->seq);
    return state_->stream->take_error();
}

StatusOr<double> Event::elapsed_ms(const Event& end) const {
    if (!timing_ || !end.timing_) {
        return invalid_argument("elapsed_time needs both events created with enable_timing=True");
    }
    if (!state_ || !end.state_) {
        return invalid_argument("elapsed_time needs both events to be recorded first");
    }
    if (device() != end.device()) {
        return invalid_argument("elapsed_time needs both events on the same device, but they were recorded on ember:" +
                                std::to_string(device()) + " and ember:" + std::to_string(end.device()));
    }
    if (!query() || !end.query()) {
        return invalid_argument("elapsed_time needs both events to have completed; "
                                "call synchronize() on them first");
    }
    int64_t a = state_->time_ns.load(std::memory_order_acquire);
    int64_t b = end.state_->time_ns.load(std::memory_order_acquire);
    return static_cast<double>(b - a) / 1e6;
}

}  // namespace ember::runtime
