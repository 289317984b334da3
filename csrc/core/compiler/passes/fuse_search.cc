// fuse(): the Fuser run until its grouping settles, and the better of two groupings kept.
//
// In-place outputs that cannot be written directly are demoted to copies and the grouping rerun.
// A value used twice is kept in scratch when costly (decide_roots). When one kernel writes it and
// one other kernel reads it, a second grouping inlines it instead; that grouping wins only when it
// needs fewer kernels, i.e. every use then sits in one loop and the value never touches memory
// (a bias gradient's column sum of an activation's derivative that the input gradient also uses).
#include <algorithm>

#include "compiler/passes/fuse_internal.h"
#include "compiler/passes/passes.h"

namespace ember::compiler {
namespace fusion {

std::vector<int> Fuser::sinkable_roots() const {
    std::vector<int> out;
    for (int v : kept_for_reuse_) {
        const int b = home_[v], p = producer_[v];
        if (b < 0 || p < 0 || plan_.buffers[b].kind != Buffer::kScratch) continue;
        int reader = -1;
        bool ok = true;
        for (size_t t = 0; t < plan_.steps.size() && ok; ++t) {
            const Step& st = plan_.steps[t];
            if (static_cast<int>(t) == p || std::find(st.reads.begin(), st.reads.end(), b) == st.reads.end()) continue;
            ok = reader < 0 && st.kind == Step::kKernel;
            reader = static_cast<int>(t);
        }
        if (!ok || reader < 0) continue;
        const Kernel& k = plan_.kernels[plan_.steps[reader].kernel];
        int phases = 0;
        for (const Phase& ph : k.phases) {
            bool reads = false;
            for (bool post : {false, true})
                for (int e : phase_loads(k, ph, post)) reads = reads || k.exprs[e].buffer == b;
            phases += reads;
        }
        if (phases == 1) out.push_back(v);
    }
    return out;
}

}  // namespace fusion

namespace {

struct Fused {
    Plan plan;
    std::vector<int> sinkable;
};

StatusOr<Fused> fuse_with(const Graph& g, const std::set<int>& inlined) {
    std::set<int> disabled;
    for (int attempt = 0; attempt < 16; ++attempt) {
        fusion::Fuser f(g, disabled, inlined);
        EMBER_RETURN_IF_ERROR(f.run());
        if (f.unsafe_aliases().empty()) {
            std::vector<int> sinkable = f.sinkable_roots();  // reads the plan: before take_plan()
            return Fused{f.take_plan(), std::move(sinkable)};
        }
        for (int v : f.unsafe_aliases()) disabled.insert(v);
    }
    return internal_error("fuse: in-place outputs did not settle");
}

}  // namespace

StatusOr<Plan> fuse(const Graph& g) {
    auto first = fuse_with(g, {});
    if (!first.ok()) return first.status();
    if (first->sinkable.empty()) return std::move(first->plan);
    auto second = fuse_with(g, std::set<int>(first->sinkable.begin(), first->sinkable.end()));
    if (second.ok() && second->plan.kernels.size() < first->plan.kernels.size()) return std::move(second->plan);
    return std::move(first->plan);
}

}  // namespace ember::compiler
