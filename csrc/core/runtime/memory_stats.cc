#include "runtime/memory_stats.h"

#include <cstdio>

namespace ember::runtime {

std::string format_bytes(uint64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

std::string format_memory_summary(int device, const MemoryStats& s) {
    std::string out;
    char line[160];
    auto row = [&](const char* name, const Stat& st, bool bytes) {
        auto fmt = [&](int64_t v) {
            return bytes ? format_bytes(static_cast<uint64_t>(v)) : std::to_string(v);
        };
        std::snprintf(line, sizeof(line), "| %-24s | %12s | %12s | %12s | %12s |\n", name,
                      fmt(st.current).c_str(), fmt(st.peak).c_str(), fmt(st.allocated).c_str(),
                      fmt(st.freed).c_str());
        out += line;
    };
    const std::string rule(87, '=');
    out += rule + "\n";
    std::string title = " ember:" + std::to_string(device) + " memory summary, capacity " +
                        format_bytes(s.capacity_bytes);
    title.resize(rule.size() - 2, ' ');
    out += "|" + title + "|\n";
    std::snprintf(line, sizeof(line), "| %-24s | %12s | %12s | %12s | %12s |\n", "Metric",
                  "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
    out += line + rule + "\n";
    row("Allocated memory", s.allocated_bytes[kAllPools], true);
    row("Active memory", s.active_bytes[kAllPools], true);
    row("Requested memory", s.requested_bytes[kAllPools], true);
    row("Reserved (cached) memory", s.reserved_bytes[kAllPools], true);
    row("Non-releasable memory", s.inactive_split_bytes[kAllPools], true);
    row("Allocations", s.allocation[kAllPools], false);
    row("Active allocs", s.active[kAllPools], false);
    row("Reserved segments", s.segment[kAllPools], false);
    out += rule + "\n";
    std::string counts = " OOMs: " + std::to_string(s.num_ooms) +
                         "   cache flushes: " + std::to_string(s.num_alloc_retries) +
                         "   device allocs: " + std::to_string(s.num_device_alloc) +
                         "   device frees: " + std::to_string(s.num_device_free);
    counts.resize(rule.size() - 2, ' ');
    out += "|" + counts + "|\n" + rule + "\n";
    return out;
}

}  // namespace ember::runtime
