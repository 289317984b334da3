// Event: a marker recorded on a stream. It completes when the stream's work up to the record
// point has finished. Other streams can wait on it (cross-stream ordering goes only through
// events), and the host can query or synchronize it. With timing enabled, the marker notes the
// time at which the stream reached it, for elapsed_ms().
//
// Thread-safety: record/wait/query/synchronize may be called from any thread; re-recording an
// event while another thread waits on it gives that waiter either record point, as in CUDA.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "base/status.h"
#include "runtime/stream.h"

namespace ember::runtime {

class Event {
  public:
    explicit Event(bool enable_timing = false);

    bool timing_enabled() const { return timing_; }
    bool recorded() const { return state_ != nullptr; }
    int device() const;

    // Marks the current end of `stream`'s queue.
    Status record(Stream& stream);
    // Makes `stream` wait (on the device, not the host) until this event has completed.
    // Waiting on an event that was never recorded is a no-op, as in CUDA.
    Status block(Stream& stream) const;
    bool query() const;
    // Blocks the host until the event has completed; returns the recording stream's error.
    Status synchronize() const;
    // Milliseconds between this event and `end`; both must be timed, recorded and completed.
    StatusOr<double> elapsed_ms(const Event& end) const;

  private:
    struct State {
        Stream* stream = nullptr;
        uint64_t seq = 0;
        std::atomic<int64_t> time_ns{-1};
    };
    bool timing_;
    std::shared_ptr<State> state_;
};

}  // namespace ember::runtime
