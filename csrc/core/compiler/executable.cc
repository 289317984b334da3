#include "compiler/executable.h"

#include "base/instrument.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/attention/attention.h"
#include "kernels/gemm/gemm.h"

namespace ember::compiler {
namespace {

kernels::TensorView view(const TensorRef& r, char* base) {
    kernels::TensorView v;
    v.data = base + r.offset * kernels::element_size(r.dtype);
    v.dtype = r.dtype;
    v.ndim = static_cast<int>(r.sizes.size());
    for (int d = 0; d < v.ndim; ++d) {
        v.sizes[d] = r.sizes[d];
        v.strides[d] = r.strides[d];
    }
    return v;
}

struct ArenaFree {
    void operator()(char* p) const { std::free(p); }
};

}  // namespace

Executable::Executable(Plan plan, std::vector<KernelFn> kernels, std::shared_ptr<void> code)
    : plan_(std::move(plan)), kernels_(std::move(kernels)), code_(std::move(code)) {
    plan_.kernels.clear();  // the loop IR is only needed by codegen
}

Status Executable::run(void* const* inputs, void* const* outputs, runtime::ThreadPool* pool) const {
    std::unique_ptr<char, ArenaFree> arena;
    if (plan_.scratch_bytes > 0) {
        const size_t bytes = static_cast<size_t>((plan_.scratch_bytes + 63) / 64 * 64);
        arena.reset(static_cast<char*>(std::aligned_alloc(64, bytes)));
        if (!arena) return out_of_memory("compiled graph: cannot allocate " + std::to_string(bytes) + " scratch bytes");
    }
    std::vector<char*> ptrs(plan_.buffers.size(), nullptr);
    for (size_t b = 0; b < plan_.buffers.size(); ++b) {
        const Buffer& buf = plan_.buffers[b];
        switch (buf.kind) {
            case Buffer::kInput: ptrs[b] = static_cast<char*>(inputs[buf.index]); break;
            case Buffer::kOutput: ptrs[b] = static_cast<char*>(outputs[buf.index]); break;
            case Buffer::kScratch: ptrs[b] = arena ? arena.get() + buf.offset : nullptr; break;
            case Buffer::kConstant:
                ptrs[b] = const_cast<char*>(reinterpret_cast<const char*>(plan_.constants[buf.index].data()));
                break;
        }
        if (ptrs[b] == nullptr && buf.kind != Buffer::kScratch && buf.bytes() > 0)
            return invalid_argument("compiled graph: " + std::string(buf.kind == Buffer::kInput ? "input " : "output ") +
                                    std::to_string(buf.index) + " is null");
    }
    char** table = ptrs.data();
    // A profiler listening sees each step inside this graph's kernel span.
    instrument::Listener* listener = instrument::listener();
    for (const Step& st : plan_.steps) {
        if (listener) listener->on_step_begin(st.label.c_str());
        switch (st.kind) {
            case Step::kKernel: {
                if (st.range <= 0) break;
                const KernelFn fn = kernels_[static_cast<size_t>(st.kernel)];
                if (pool && pool->num_threads() > 1 && st.range > st.grain) {
                    pool->parallel_for(st.range, st.grain, [&](int64_t b, int64_t e) { fn(table, b, e); });
                } else {
                    fn(table, 0, st.range);
                }
                break;
            }
            case Step::kGemm: {
                kernels::GemmArgs args;
                args.a = view(st.refs[0], ptrs[st.refs[0].buffer]);
                args.b = view(st.refs[1], ptrs[st.refs[1].buffer]);
                args.c = view(st.refs[2], ptrs[st.refs[2].buffer]);
                args.alpha = st.f0;
                args.beta = st.f1;
                EMBER_RETURN_IF_ERROR(kernels::gemm(args, pool));
                break;
            }
            case Step::kAttention: {
                kernels::AttentionArgs args;
                args.q = view(st.refs[0], ptrs[st.refs[0].buffer]);
                args.k = view(st.refs[1], ptrs[st.refs[1].buffer]);
                args.v = view(st.refs[2], ptrs[st.refs[2].buffer]);
                args.out = view(st.refs[3], ptrs[st.refs[3].buffer]);
                args.lse = view(st.refs[4], ptrs[st.refs[4].buffer]);
                if (st.refs.size() > 5) args.mask = view(st.refs[5], ptrs[st.refs[5].buffer]);
                args.scale = st.f0;
                args.causal = st.i0 != 0;
                static runtime::ThreadPool serial(1);
                EMBER_RETURN_IF_ERROR(kernels::attention_forward(args, pool ? pool : &serial));
                break;
            }
        }
        if (listener) listener->on_step_end(st.label.c_str());
    }
    return {};
}

}  // namespace ember::compiler
