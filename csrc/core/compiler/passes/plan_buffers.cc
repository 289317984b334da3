// plan_buffers: gives every scratch buffer an offset in one arena per run. A buffer is live from
// the first step that touches it to the last; buffers whose lives do not overlap share memory
// (first fit, in order of first use). Offsets are 64-byte aligned so that vector loads never
// straddle a cache line at a row start.
#include <algorithm>
#include <climits>

#include "compiler/passes/passes.h"

namespace ember::compiler {

Status plan_buffers(Plan& p) {
    const size_t nb = p.buffers.size();
    std::vector<int> first(nb, INT_MAX), last(nb, -1);
    for (size_t t = 0; t < p.steps.size(); ++t) {
        const Step& st = p.steps[t];
        for (const auto* list : {&st.reads, &st.writes}) {
            for (int b : *list) {
                first[b] = std::min(first[b], static_cast<int>(t));
                last[b] = std::max(last[b], static_cast<int>(t));
            }
        }
    }
    std::vector<int> order;
    for (size_t b = 0; b < nb; ++b)
        if (p.buffers[b].kind == Buffer::kScratch && last[b] >= 0) order.push_back(static_cast<int>(b));
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return first[a] < first[b]; });

    struct Block {
        int64_t offset, size;
        int last;
    };
    std::vector<Block> active;  // sorted by offset
    int64_t total = 0;
    for (int b : order) {
        active.erase(std::remove_if(active.begin(), active.end(), [&](const Block& x) { return x.last < first[b]; }),
                     active.end());
        const int64_t size = (std::max<int64_t>(p.buffers[b].bytes(), 1) + 63) / 64 * 64;
        int64_t offset = 0;
        for (const Block& x : active) {
            if (x.offset - offset >= size) break;
            offset = std::max(offset, x.offset + x.size);
        }
        p.buffers[b].offset = offset;
        active.push_back({offset, size, last[b]});
        std::sort(active.begin(), active.end(), [](const Block& x, const Block& y) { return x.offset < y.offset; });
        total = std::max(total, offset + size);
    }
    p.scratch_bytes = total;
    return {};
}

}  // namespace ember::compiler
