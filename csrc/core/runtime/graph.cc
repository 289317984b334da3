#include "runtime/graph.h"

#include <atomic>

namespace ember::runtime {
namespace {
std::atomic<int64_t> g_next_id{1};
}  // namespace

Graph::Graph() : id_(g_next_id.fetch_add(1)) {}

Status Graph::replay(Stream& stream) const {
    for (const Entry& e : tasks_) {
        auto seq = stream.enqueue(e.name, e.task);
        if (!seq.ok()) return seq.status();
    }
    return Status();
}

}  // namespace ember::runtime
