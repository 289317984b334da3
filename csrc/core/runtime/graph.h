// Graph: the work one stream recorded while it was capturing, replayable as a unit (the shape
// of a CUDA graph).
//
// Capture records each enqueued task instead of running it; a task's kernel arguments (device
// pointers, sizes, scalars) were fixed when the op was called, so a replay runs the same
// kernels on the same memory. Inputs change between replays by writing into the tensors the
// capture read; outputs are the tensors it wrote. The device's allocator keeps every block
// allocated during the capture for the graph (release() gives them back), so no later
// allocation can take memory a replay still writes.
//
// Thread-safety: add() is called by the capturing stream's enqueue only; replay() and the
// accessors may be called from any thread once the capture ended.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "runtime/stream.h"

namespace ember::runtime {

class Graph {
  public:
    Graph();
    int64_t id() const { return id_; }
    size_t size() const { return tasks_.size(); }
    void add(const char* name, Task task) { tasks_.push_back({name, std::move(task)}); }
    // Enqueues a copy of every recorded task on `stream`, in capture order.
    Status replay(Stream& stream) const;

  private:
    struct Entry {
        const char* name;
        Task task;
    };
    int64_t id_;
    std::vector<Entry> tasks_;
};

}  // namespace ember::runtime
