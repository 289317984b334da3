// HostSignal: a one-shot flag that the host sets and a stream task waits for.
//
// Work that runs outside the device's kernels (a collective that the host's network stack
// carries, over Gloo) takes its place in a stream's order through a signal: a task queued on the
// stream blocks in wait() until the host calls set(), so later work on that stream, and on
// streams that wait on an event recorded after the task, runs after the host work finished.
// A real device would implement the same call as a host-written semaphore the queue polls.
//
// Errors: set(error) with a message makes wait() return that message as a kKernelFailed Status,
// so it is stored on the stream and reaches waiting streams like any kernel failure. A wait that
// outlasts its timeout returns an error naming `what` instead of blocking the stream forever.
//
// Thread-safety: set() and wait() may be called from any thread; the first set() wins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "base/status.h"

namespace ember::runtime {

class HostSignal {
  public:
    void set(std::string error = {});
    bool is_set() const;
    Status wait(std::chrono::milliseconds timeout, const std::string& what) const;

  private:
    mutable std::mutex mu_;
    mutable std::condition_variable cv_;
    bool set_ = false;
    std::string error_;
};

}  // namespace ember::runtime
