#include "compiler/pipeline.h"

#include <dlfcn.h>

#include <fstream>
#include <vector>

#include <chrono>
#include <cstdio>
#include <sstream>

#include "base/env.h"
#include "compiler/cache/cache.h"
#include "compiler/cache/sha256.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/passes.h"

#if EMBER_WITH_LLVM
#include "compiler/codegen/llvm_emit.h"
#include "compiler/jit/orc_jit.h"
#endif

namespace ember::compiler {

namespace {

// The compiler's own code, as built: a hash of the binary that holds this function (the
// extension module, or the test binary). A cached executable is only trusted from the very
// same compiler, so any rebuild (a codegen fix, say) invalidates what older builds cached, even
// while kCompilerVersion stays the same.
const std::string& build_fingerprint() {
    static const std::string fp = [] {
        Dl_info info{};
        if (dladdr(reinterpret_cast<void*>(&build_fingerprint), &info) == 0 || info.dli_fname == nullptr)
            return std::string("unknown build");
        std::ifstream f(info.dli_fname, std::ios::binary);
        if (!f) return std::string("unknown build");
        Sha256 h;
        std::vector<char> buf(1 << 20);
        while (f) {
            f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
            h.update(std::string_view(buf.data(), static_cast<size_t>(f.gcount())));
        }
        const auto d = h.digest();
        return to_hex(d.data(), d.size());
    }();
    return fp;
}

}  // namespace
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

struct Dumper {
    std::string what;
    bool wants(const char* pass) const {
        if (what.empty()) return false;
        if (what == "all") return true;
        std::stringstream ss(what);
        std::string item;
        while (std::getline(ss, item, ','))
            if (item == pass) return true;
        return false;
    }
    void dump(const char* pass, const std::string& text) const {
        if (!wants(pass)) return;
        std::fprintf(stderr, "=== ember IR after %s ===\n%s", pass, text.c_str());
    }
};

#if EMBER_WITH_LLVM
StatusOr<std::shared_ptr<const Executable>> link(Plan plan, std::string_view object) {
    auto loaded = jit::load_object(object, plan.kernel_names);
    if (!loaded.ok()) return loaded.status();
    std::vector<KernelFn> fns;
    for (size_t i = 0; i < plan.kernel_names.size(); ++i)
        fns.push_back(reinterpret_cast<KernelFn>(loaded.value()->symbol(i)));
    std::shared_ptr<void> code(std::move(loaded.value()));
    return std::shared_ptr<const Executable>(std::make_shared<Executable>(std::move(plan), std::move(fns), std::move(code)));
}
#endif

}  // namespace

bool llvm_available() { return EMBER_WITH_LLVM != 0; }

std::string CompileStats::to_string() const {
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "ember compile: %s%s, %d nodes -> %d kernels + %d library calls (%d fused); "
                  "verify %.2f ms, lower %.2f ms, optimize %.2f ms, codegen %.2f ms (opt %.2f, mc %.2f), jit %.2f ms, "
                  "load %.2f ms, total %.2f ms",
                  cache_hit ? "cache hit" : "cache miss", cache_corrupt ? " (corrupt entry replaced)" : "", nodes,
                  kernels, library_calls, nodes_fused, verify_ms, lower_ms, optimize_ms, codegen_ms, codegen_opt_ms,
                  codegen_mc_ms, jit_ms, load_ms,
                  total_ms);
    return buf;
}

StatusOr<std::shared_ptr<const Executable>> compile(const Graph& graph, const CompileOptions& options,
                                                    CompileStats* stats_out) {
    CompileStats local;
    CompileStats& stats = stats_out ? *stats_out : local;
    stats = CompileStats{};
    const auto t_start = Clock::now();
    Dumper dumper{options.dump_ir.empty() ? env::get("EMBER_DUMP_IR").value_or("") : options.dump_ir};
    const bool verify_each = options.verify_each_pass || env::get("EMBER_VERIFY_IR").value_or("0") == "1";
    stats.nodes = static_cast<int>(graph.nodes().size());

    auto t = Clock::now();
    dumper.dump("graph", graph.to_string());
    EMBER_RETURN_IF_ERROR(verify(graph));
    stats.verify_ms = ms_since(t);

#if !EMBER_WITH_LLVM
    (void)verify_each;
    return unimplemented(
        "ember was built without LLVM (EMBER_WITH_LLVM=OFF), so torch.compile(backend='ember') is unavailable; "
        "install llvm-19-dev and rebuild");
#else
    const bool cached = options.use_cache && !options.cache_dir.empty();
    CompileCache cache(options.cache_dir);
    std::string key;
    if (cached) {
        Sha256 h;
        h.update(kCompilerVersion);
        h.update(build_fingerprint());
        h.update(jit::host_fingerprint());
        h.update(graph.serialize());
        // Source lines do not change the code, but the stored plan labels its steps with them
        // for profilers: another program's graph of the same ops must not lend it its lines.
        for (const Node& n : graph.nodes()) {
            h.update(n.source);
            h.update(std::string_view("\n"));
        }
        const auto d = h.digest();
        key = to_hex(d.data(), d.size());
        stats.cache_key = key;
        t = Clock::now();
        CompileCache::Entry entry;
        std::string why;
        const auto found = cache.load(key, &entry, &why);
        if (found == CompileCache::Lookup::kHit) {
            auto plan = Plan::deserialize(entry.plan);
            if (plan.ok()) {
                stats.load_ms = ms_since(t);
                const int kernels = static_cast<int>(plan->kernel_names.size());
                const int64_t scratch = plan->scratch_bytes;
                int library = 0;
                for (const Step& s : plan->steps) library += s.kind != Step::kKernel;
                const int fused = plan->nodes_fused;
                t = Clock::now();
                auto exe = link(std::move(plan.value()), entry.object);
                stats.jit_ms = ms_since(t);
                if (exe.ok()) {
                    stats.cache_hit = true;
                    stats.kernels = kernels;
                    stats.library_calls = library;
                    stats.nodes_fused = fused;
                    stats.scratch_bytes = scratch;
                    stats.object_bytes = static_cast<int64_t>(entry.object.size());
                    stats.total_ms = ms_since(t_start);
                    return exe;
                }
                why = "object does not link: " + exe.status().message();
            } else {
                why = "plan does not parse: " + plan.status().message();
            }
            stats.cache_corrupt = true;
        } else if (found == CompileCache::Lookup::kCorrupt) {
            stats.cache_corrupt = true;
        }
        if (stats.cache_corrupt)
            stats.warning = "ember compile cache: entry " + cache.entry_path(key) + " is corrupt (" + why +
                            "); recompiling and replacing it";
        stats.load_ms = ms_since(t);
    }

    t = Clock::now();
    auto lowered = decompose(graph);
    if (!lowered.ok()) return lowered.status();
    dumper.dump("decompose", lowered->to_string());
    if (verify_each) EMBER_RETURN_IF_ERROR(verify(lowered.value()));
    stats.lower_ms = ms_since(t);

    t = Clock::now();
    auto plan = fuse(lowered.value());
    if (!plan.ok()) return plan.status();
    dumper.dump("fuse", plan->to_string());
    EMBER_RETURN_IF_ERROR(reuse_values(plan.value()));
    EMBER_RETURN_IF_ERROR(plan_buffers(plan.value()));
    dumper.dump("plan_buffers", plan->to_string());
    stats.optimize_ms = ms_since(t);
    stats.kernels = static_cast<int>(plan->kernels.size());
    for (const Step& s : plan->steps) stats.library_calls += s.kind != Step::kKernel;
    stats.nodes_fused = plan->nodes_fused;
    stats.scratch_bytes = plan->scratch_bytes;

    t = Clock::now();
    auto object = codegen::emit_object(plan.value(), dumper.wants("llvm"));
    if (!object.ok()) return object.status();
    dumper.dump("llvm", object->ir_text);
    stats.codegen_ms = ms_since(t);
    stats.codegen_opt_ms = object->opt_ms;
    stats.codegen_mc_ms = object->mc_ms;
    stats.object_bytes = static_cast<int64_t>(object->object.size());

    std::string serialized;
    if (cached) serialized = plan->serialize();
    t = Clock::now();
    auto exe = link(std::move(plan.value()), object->object);
    if (!exe.ok()) return exe.status();
    stats.jit_ms = ms_since(t);

    if (cached) {
        Status st = cache.store(key, {std::move(serialized), std::move(object->object)});
        if (!st.ok()) stats.warning += (stats.warning.empty() ? "" : "; ") + st.message();
    }
    stats.total_ms = ms_since(t_start);
    return exe;
#endif
}

}  // namespace ember::compiler
