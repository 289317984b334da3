// fuse: groups the graph into kernels and library steps (see fuse_internal.h for the terms).
//
// Roots are placed in graph order. Each tries the most recent kernels first (a few, newest to
// oldest): it joins one whose domain fits if everything it reads from that kernel is at the same
// outer index. A failed attempt is rolled back and ends the search, because it means the root
// depends on that kernel in a way no earlier kernel can satisfy. Library ops become their own
// steps; their operands are passed as strided views of existing buffers whenever the chain of
// views allows (a transposed weight costs no copy), else materialized.
//
// In-place outputs (aliases) are written straight into the input's memory when that is safe:
// the value is stored in the same loop that reads the old value at the same element, and no
// later step reads the input. Otherwise fuse() reruns with that alias demoted to a copy at the
// end of the program (fuse_search.cc).
#include <algorithm>
#include <cmath>

#include "base/env.h"
#include "compiler/codegen/column_form.h"
#include "compiler/passes/fuse_internal.h"
#include "compiler/passes/passes.h"
#include "runtime/thread_pool.h"

namespace ember::compiler {
namespace fusion {
namespace {

constexpr int kMaxJoinTries = 8;
constexpr int kRealizeCost = 6;  // roughly: one transcendental, or six adds
constexpr int64_t kChunk = 4096;

int own_cost(Op op) {
    switch (op_kind(op)) {
        case OpKind::kView: return 0;
        case OpKind::kUnary:
            return (op == Op::kNeg || op == Op::kAbs || op == Op::kRelu || op == Op::kNot) ? 1 : 6;
        default: return op == Op::kPow ? 6 : 1;
    }
}

// Sums of more values than this accumulate float32 in float64 (see the reduction root below).
constexpr int64_t kLongSum = 8192;

Cls acc_class(Op op, DType in) {
    Cls c = value_class(in);
    return c == Cls::kBool ? Cls::kI64 : c;
}

// Strides of a view of `r`, or false when `w` cannot be a view of that layout (a reshape of a
// non-contiguous block), following PyTorch's computeStride.
bool apply_view(TensorRef& r, const Graph& g, const Node& w) {
    const auto out = w.sizes;
    const int64_t ri = static_cast<int64_t>(r.sizes.size());
    auto norm = [](int64_t d, int64_t rank) { return d < 0 ? d + rank : d; };
    std::vector<int64_t> st;
    switch (w.op) {
        case Op::kExpand: {
            const size_t lead = out.size() - r.sizes.size();
            st.assign(out.size(), 0);
            for (size_t i = 0; i < r.sizes.size(); ++i) st[lead + i] = r.sizes[i] == 1 ? 0 : r.strides[i];
            break;
        }
        case Op::kPermute:
            for (int64_t d : w.attrs.ints) st.push_back(r.strides[norm(d, ri)]);
            break;
        case Op::kTranspose:
            st = r.strides;
            if (ri) std::swap(st[norm(w.attrs.ints[0], ri)], st[norm(w.attrs.ints[1], ri)]);
            break;
        case Op::kSlice: {
            st = r.strides;
            const int64_t d = norm(w.attrs.ints[0], ri);
            int64_t start = w.attrs.ints[1];
            if (start < 0) start += r.sizes[d];
            start = std::clamp<int64_t>(start, 0, r.sizes[d]);
            r.offset += start * st[d];
            st[d] *= w.attrs.ints[3];
            break;
        }
        case Op::kSqueeze: {
            std::vector<bool> drop(r.sizes.size(), w.attrs.ints.empty());
            for (int64_t d : w.attrs.ints) drop[norm(d, ri)] = true;
            for (size_t i = 0; i < r.sizes.size(); ++i)
                if (!(drop[i] && r.sizes[i] == 1)) st.push_back(r.strides[i]);
            break;
        }
        case Op::kUnsqueeze:
            st = r.strides;
            st.insert(st.begin() + norm(w.attrs.ints[0], ri + 1), 1);
            break;
        case Op::kReshape: {
            const auto& old = r.sizes;
            if (numel_of(old) == 0 || old.empty()) {
                st = contiguous_strides(out);
                break;
            }
            st.assign(out.size(), 0);
            int64_t view_d = static_cast<int64_t>(out.size()) - 1;
            int64_t chunk_base = r.strides.back(), tensor_numel = 1, view_numel = 1;
            for (int64_t d = ri - 1; d >= 0; --d) {
                tensor_numel *= old[d];
                if (d == 0 || (old[d - 1] != 1 && r.strides[d - 1] != tensor_numel * chunk_base)) {
                    while (view_d >= 0 && (view_numel < tensor_numel || out[view_d] == 1)) {
                        st[view_d] = view_numel * chunk_base;
                        view_numel *= out[view_d];
                        --view_d;
                    }
                    if (view_numel != tensor_numel) return false;
                    if (d > 0) {
                        chunk_base = r.strides[d - 1];
                        tensor_numel = 1;
                        view_numel = 1;
                    }
                }
            }
            if (view_d != -1) return false;
            break;
        }
        default: return false;
    }
    (void)g;
    r.sizes = out;
    r.strides = st;
    return true;
}

void collect(const Kernel& k, int e, std::vector<char>& seen, std::vector<int>& loads) {
    if (e < 0 || seen[static_cast<size_t>(e)]) return;
    seen[static_cast<size_t>(e)] = 1;
    const Expr& x = k.exprs[static_cast<size_t>(e)];
    if (x.kind == Expr::kLoad) loads.push_back(e);
    if (x.kind == Expr::kReduced) collect(k, k.reductions[static_cast<size_t>(x.reduction)].expr, seen, loads);
    for (int a : x.args) collect(k, a, seen, loads);
}

}  // namespace

// Loads reachable from a phase's loop (post = false) or its post stores (post = true).
std::vector<int> phase_loads(const Kernel& k, const Phase& p, bool post) {
    std::vector<char> seen(k.exprs.size(), 0);
    std::vector<int> loads;
    if (!post) {
        for (const Store& s : p.stores) collect(k, s.expr, seen, loads);
        for (int r : p.reductions) collect(k, k.reductions[static_cast<size_t>(r)].expr, seen, loads);
    } else {
        for (const Store& s : p.post) collect(k, s.expr, seen, loads);
    }
    return loads;
}

Fuser::Fuser(const Graph& g, std::set<int> disabled, std::set<int> inlined)
    : g_(g), disabled_(std::move(disabled)), inlined_(std::move(inlined)) {}

int Fuser::scratch_buffer(DType dtype, const std::vector<int64_t>& sizes) {
    Buffer b;
    b.kind = Buffer::kScratch;
    b.dtype = dtype;
    b.sizes = sizes;
    b.strides = contiguous_strides(sizes);
    plan_.buffers.push_back(std::move(b));
    return static_cast<int>(plan_.buffers.size()) - 1;
}

int Fuser::home(int v) {
    if (home_[v] < 0) home_[v] = scratch_buffer(g_.node(v).dtype, g_.node(v).sizes);
    return home_[v];
}

Status Fuser::assign_homes() {
    const auto& outs = g_.outputs();
    output_buffer_.assign(outs.size(), -1);
    for (size_t i = 0; i < outs.size(); ++i) {
        const Node& n = g_.node(outs[i].value);
        OutputInfo info;
        info.dtype = n.dtype;
        info.sizes = n.sizes;
        info.alias_input = outs[i].alias_input;
        if (outs[i].alias_input >= 0) {
            info.strides = plan_.buffers[input_buffer_[outs[i].alias_input]].strides;
        } else {
            Buffer b;
            b.kind = Buffer::kOutput;
            b.index = static_cast<int>(i);
            b.dtype = n.dtype;
            b.sizes = n.sizes;
            b.strides = contiguous_strides(n.sizes);
            info.strides = b.strides;
            plan_.buffers.push_back(std::move(b));
            output_buffer_[i] = static_cast<int>(plan_.buffers.size()) - 1;
        }
        plan_.outputs.push_back(std::move(info));
    }
    for (size_t i = 0; i < outs.size(); ++i) {
        const int v = outs[i].value;
        const OpKind kind = op_kind(g_.node(v).op);
        const bool pointwise = is_pointwise(kind);
        if (outs[i].alias_input >= 0) {
            const int ib = input_buffer_[outs[i].alias_input];
            if (v == g_.input_value(outs[i].alias_input)) continue;  // unchanged input
            if (!disabled_.count(v) && home_[v] < 0 && pointwise) {
                home_[v] = ib;
                aliases_.push_back({v, ib});
                is_root_[v] = 1;
            } else {
                late_copies_.push_back({v, ib});
                if (pointwise) is_root_[v] = 1;
            }
            needed_[v] = 1;
            continue;
        }
        const int ob = output_buffer_[i];
        if (home_[v] < 0 && (pointwise || kind == OpKind::kReduce || kind == OpKind::kLibrary)) {
            home_[v] = ob;
            needed_[v] = 1;
            if (pointwise) is_root_[v] = 1;
        } else {
            copies_.push_back({v, ob});
        }
    }
    return {};
}

void Fuser::decide_roots() {
    std::vector<int> cost(g_.nodes().size(), 1);
    std::vector<int> uses(g_.nodes().size(), 0);
    for (size_t v = 0; v < g_.nodes().size(); ++v) uses[v] = static_cast<int>(users_[v].size());
    for (const Output& o : g_.outputs()) ++uses[o.value];
    for (size_t v = 0; v < g_.nodes().size(); ++v) {
        const Node& n = g_.node(static_cast<int>(v));
        if (!live_[v] || !is_pointwise(op_kind(n.op))) continue;
        int c = own_cost(n.op);
        for (int in : n.inputs) c += (is_root_[in] || !is_pointwise(op_kind(g_.node(in).op))) ? 1 : cost[in];
        const bool reused = uses[v] >= 2 && c >= kRealizeCost && op_kind(n.op) != OpKind::kView;
        if (!is_root_[v] && reused && c <= 64) {
            if (inlined_.count(static_cast<int>(v))) {
                cost[v] = c;
                continue;
            }
            kept_for_reuse_.push_back(static_cast<int>(v));
        }
        if (reused || c > 64) is_root_[v] = 1;
        cost[v] = is_root_[v] ? 1 : c;
    }
}

int Fuser::new_kernel(const std::vector<int64_t>& shape, std::vector<int> inner_dims, bool allow_chunk) {
    Kernel k;
    k.name = "ember_k" + std::to_string(plan_.kernels.size());
    const int rank = static_cast<int>(shape.size());
    std::vector<int> outer_dims;
    for (int d = 0; d < rank; ++d)
        if (std::find(inner_dims.begin(), inner_dims.end(), d) == inner_dims.end()) outer_dims.push_back(d);
    for (int d : outer_dims) k.outer.push_back(shape[d]);
    for (int d : inner_dims) k.inner.push_back(shape[d]);
    bool chunked = false;
    if (allow_chunk && rank >= 1 && inner_dims.size() == 1 && inner_dims[0] == rank - 1 &&
        shape.back() >= 4 * kChunk && numel_of(k.outer) < 64) {
        k.tail = shape.back();
        k.outer.push_back((shape.back() + kChunk - 1) / kChunk);
        k.inner = {kChunk};
        chunked = true;
    }
    plan_.kernels.push_back(std::move(k));
    Step st;
    st.kind = Step::kKernel;
    st.kernel = static_cast<int>(plan_.kernels.size()) - 1;
    plan_.steps.push_back(st);

    KernelState s;
    s.kernel = st.kernel;
    s.step = static_cast<int>(plan_.steps.size()) - 1;
    s.shape = shape;
    s.inner_dims = inner_dims;
    s.chunked = chunked;
    states_.push_back(std::move(s));
    KernelState& ks = states_.back();
    LowerCtx c;
    begin_attempt(c, ks);
    ks.dim_idx.assign(shape.size(), -1);
    const int no = static_cast<int>(outer_dims.size());
    for (int i = 0; i < no; ++i)
        ks.dim_idx[outer_dims[i]] = shape[outer_dims[i]] == 1 ? make_idx(c, Idx::kConst, 0, 0) : make_idx(c, Idx::kVar, i, 0);
    const int var0 = static_cast<int>(c.k->outer.size());
    for (size_t i = 0; i < inner_dims.size(); ++i) {
        const int d = inner_dims[i];
        if (chunked) {
            ks.dim_idx[d] = make_idx(c, Idx::kAdd, make_idx(c, Idx::kMul, make_idx(c, Idx::kVar, var0 - 1, 0), kChunk),
                                     make_idx(c, Idx::kVar, var0, 0));
        } else {
            ks.dim_idx[d] = shape[d] == 1 ? make_idx(c, Idx::kConst, 0, 0) : make_idx(c, Idx::kVar, var0 + static_cast<int>(i), 0);
        }
    }
    return static_cast<int>(states_.size()) - 1;
}

bool Fuser::compatible_full(const KernelState& s, const std::vector<int64_t>& shape) const { return s.shape == shape; }

int Fuser::kept_form(const KernelState& s, const std::vector<int64_t>& shape) const {
    if (s.chunked || s.inner_dims.empty()) return 0;
    std::vector<int64_t> keep = s.shape, drop;
    for (size_t d = 0; d < s.shape.size(); ++d) {
        const bool inner = std::find(s.inner_dims.begin(), s.inner_dims.end(), static_cast<int>(d)) != s.inner_dims.end();
        if (inner) keep[d] = 1;
        else drop.push_back(s.shape[d]);
    }
    if (shape == keep) return 1;
    if (shape == drop) return 2;
    return 0;
}

std::vector<int> Fuser::kept_idx(const KernelState& s, int form) const {
    std::vector<int> r;
    for (size_t d = 0; d < s.shape.size(); ++d) {
        const bool inner = std::find(s.inner_dims.begin(), s.inner_dims.end(), static_cast<int>(d)) != s.inner_dims.end();
        if (inner) {
            if (form == 1) r.push_back(-1);
        } else {
            r.push_back(s.shape[d] == 1 ? -1 : s.dim_idx[d]);
        }
    }
    return r;
}

namespace {
void ensure_phase(Kernel& k, int p) {
    if (static_cast<int>(k.phases.size()) <= p) k.phases.resize(static_cast<size_t>(p) + 1);
}
}  // namespace

bool Fuser::place_root(int v) {
    const Node& n = g_.node(v);
    const bool reduce = op_kind(n.op) == OpKind::kReduce;
    const std::vector<int64_t> shape = reduce ? g_.node(n.inputs[0]).sizes : n.sizes;
    std::vector<int> rd;
    if (reduce) for (int d : reduce_dims(n, static_cast<int>(shape.size()))) rd.push_back(d);

    auto attempt = [&](KernelState& s, int form) {
        LowerCtx c;
        begin_attempt(c, s);
        const size_t nidx = c.k->idx.size(), nexpr = c.k->exprs.size(), nred = c.k->reductions.size();
        const int zero = make_idx(c, Idx::kConst, 0, 0);
        RootInfo ri;
        if (reduce) {
            const int e = lower(c, n.inputs[0], s.dim_idx);
            if (c.failed) { rollback(c, nidx, nexpr, nred); return false; }
            Reduction red;
            red.op = n.op;
            red.expr = e;
            red.acc = acc_class(n.op, g_.node(n.inputs[0]).dtype);
            red.count = 1;
            for (int d : s.inner_dims) red.count *= s.shape[d];
            const Cls value_cls = (n.op == Op::kMean && !is_float_cls(red.acc)) ? Cls::kF32 : red.acc;
            // A long float32 sum adds each value to one of a few running partial sums (one per
            // vector lane), so its error grows with the count: 1% for 2^25 values. Past
            // kLongSum values the total is kept in float64 (the row form adds float32 blocks of
            // values into it, llvm_emit.cc), and the result rounded once.
            if (red.acc == Cls::kF32 && (n.op == Op::kSum || n.op == Op::kMean) && red.count > kLongSum)
                red.acc = Cls::kF64;
            c.k->reductions.push_back(red);
            const int rid = static_cast<int>(c.k->reductions.size()) - 1;
            ri.kind = RootInfo::kReduce;
            ri.phase = c.level;
            ensure_phase(*c.k, ri.phase);
            c.k->phases[ri.phase].reductions.push_back(rid);
            Expr x;
            x.kind = Expr::kReduced;
            x.reduction = rid;
            x.cls = value_cls;
            ri.expr = add_expr(c, x);
            ri.out_idx = kept_idx(s, reduce_keepdim(n) ? 1 : 2);
        } else if (form == 0) {
            ri.expr = lower_def(c, v, s.dim_idx);
            if (c.failed) { rollback(c, nidx, nexpr, nred); return false; }
            ri.kind = RootInfo::kFull;
            ri.phase = c.level;
            ri.out_idx = s.dim_idx;
            for (size_t d = 0; d < s.shape.size(); ++d) if (s.shape[d] == 1) ri.out_idx[d] = -1;
        } else {
            c.outer_scope = true;
            ri.out_idx = kept_idx(s, form);
            std::vector<int> idx = ri.out_idx;
            for (int& i : idx) if (i < 0) i = zero;
            ri.expr = lower_def(c, v, idx);
            if (c.failed) { rollback(c, nidx, nexpr, nred); return false; }
            ri.kind = RootInfo::kOuter;
            ri.phase = std::max(c.level - 1, 0);
        }
        ensure_phase(*c.k, ri.phase);
        for (int need : c.needs) needed_[need] = 1;
        s.roots[v] = ri;
        s.root_order.push_back(v);
        producer_[v] = s.step;
        return true;
    };

    int tries = 0;
    for (int si = static_cast<int>(states_.size()) - 1; si >= 0 && tries < kMaxJoinTries; --si) {
        KernelState& s = states_[si];
        if (s.sealed) break;
        int form = 0;
        if (reduce) {
            if (s.chunked || s.shape != shape || s.inner_dims != rd) continue;
        } else if (!compatible_full(s, shape)) {
            form = kept_form(s, shape);
            if (!form) continue;
        }
        ++tries;
        if (attempt(s, form)) return true;
        break;
    }
    std::vector<int> inner = rd;
    if (!reduce && !shape.empty()) inner = {static_cast<int>(shape.size()) - 1};
    return attempt(states_[new_kernel(shape, inner, !reduce)], 0);
}

bool Fuser::place_pseudo(const std::vector<int64_t>& shape, const std::function<int(LowerCtx&)>& make,
                         int dest, bool late) {
    auto attempt = [&](KernelState& s) {
        LowerCtx c;
        begin_attempt(c, s);
        const size_t nidx = c.k->idx.size(), nexpr = c.k->exprs.size(), nred = c.k->reductions.size();
        const int e = make(c);
        if (c.failed) { rollback(c, nidx, nexpr, nred); return false; }
        ensure_phase(*c.k, c.level);
        Store st;
        st.buffer = dest;
        st.dtype = plan_.buffers[dest].dtype;
        st.addr = address(c, s.dim_idx, plan_.buffers[dest].strides, shape);
        st.expr = e;
        c.k->phases[c.level].stores.push_back(st);
        for (int need : c.needs) needed_[need] = 1;
        return true;
    };
    int tries = 0;
    for (int si = static_cast<int>(states_.size()) - 1; si >= 0 && tries < kMaxJoinTries; --si) {
        KernelState& s = states_[si];
        if (s.sealed || (late && si < late_barrier_)) break;
        if (!compatible_full(s, shape)) continue;
        ++tries;
        if (attempt(s)) return true;
        break;
    }
    std::vector<int> inner;
    if (!shape.empty()) inner = {static_cast<int>(shape.size()) - 1};
    return attempt(states_[new_kernel(shape, inner, true)]);
}

StatusOr<TensorRef> Fuser::operand_ref(int v, bool unit_last) {
    int b = v;
    std::vector<int> chain;
    while (op_kind(g_.node(b).op) == OpKind::kView) {
        chain.push_back(b);
        b = g_.node(b).inputs[0];
    }
    const Node& bn = g_.node(b);
    int buf = -1;
    if (bn.op == Op::kInput) buf = input_buffer_[bn.input_index];
    else if (bn.op == Op::kConstant && !bn.data.empty()) buf = home_[b];
    else if (producer_[b] >= 0) {
        buf = home(b);
        needed_[b] = 1;
    }
    if (buf >= 0) {
        TensorRef r;
        r.buffer = buf;
        r.dtype = plan_.buffers[buf].dtype;
        r.sizes = plan_.buffers[buf].sizes;
        r.strides = plan_.buffers[buf].strides;
        bool ok = true;
        for (size_t i = chain.size(); i-- > 0 && ok;) ok = apply_view(r, g_, g_.node(chain[i]));
        if (ok && (!unit_last || r.sizes.empty() || r.strides.back() == 1 || r.sizes.back() == 1)) return r;
    }
    const Node& n = g_.node(v);
    const int sb = scratch_buffer(n.dtype, n.sizes);
    if (!place_pseudo(n.sizes, [&](LowerCtx& c) { return lower(c, v, c.s->dim_idx); }, sb, false))
        return internal_error("fuse: could not materialize a library operand");
    TensorRef r;
    r.buffer = sb;
    r.dtype = n.dtype;
    r.sizes = n.sizes;
    r.strides = plan_.buffers[sb].strides;
    return r;
}

namespace {
TensorRef to3d(TensorRef r) {
    if (r.sizes.size() == 2) {
        r.sizes.insert(r.sizes.begin(), 1);
        r.strides.insert(r.strides.begin(), 0);
    }
    return r;
}
TensorRef whole(const Plan& p, int b) {
    TensorRef r;
    r.buffer = b;
    r.dtype = p.buffers[b].dtype;
    r.sizes = p.buffers[b].sizes;
    r.strides = p.buffers[b].strides;
    return r;
}
}  // namespace

Status Fuser::process_library(int v) {
    const Node& n = g_.node(v);
    Step st;
    const int out = home(v);
    needed_[v] = 1;
    if (n.op == Op::kAttention) {
        st.kind = Step::kAttention;
        for (int i = 0; i < 3; ++i) {
            auto r = operand_ref(n.inputs[i], true);
            if (!r.ok()) return r.status();
            st.refs.push_back(r.value());
        }
        st.refs.push_back(whole(plan_, out));
        const auto& q = g_.node(n.inputs[0]).sizes;
        st.refs.push_back(whole(plan_, scratch_buffer(DType::kFloat32, {q[0], q[1], q[2]})));
        if (n.inputs.size() > 3) {
            auto m = operand_ref(n.inputs[3], false);
            if (!m.ok()) return m.status();
            st.refs.push_back(m.value());
        }
        st.f0 = n.attrs.floats.empty() ? 1.0 / std::sqrt(static_cast<double>(q[3])) : n.attrs.floats[0];
        st.i0 = n.attrs.ints.empty() ? 0 : n.attrs.ints[0];
    } else {
        const bool addmm = n.op == Op::kAddmm;
        auto a = operand_ref(n.inputs[addmm ? 1 : 0], false);
        if (!a.ok()) return a.status();
        auto b = operand_ref(n.inputs[addmm ? 2 : 1], false);
        if (!b.ok()) return b.status();
        if (a->dtype != n.dtype || b->dtype != n.dtype)
            return unimplemented(std::string("op '") + op_name(n.op) + "' at " + n.source + ": mixed operand dtypes");
        st.kind = Step::kGemm;
        st.f0 = addmm && n.attrs.floats.size() > 1 ? n.attrs.floats[1] : 1.0;
        const double beta = addmm ? (n.attrs.floats.empty() ? 1.0 : n.attrs.floats[0]) : 0.0;
        if (beta != 0.0) {
            const int bias = n.inputs[0];
            auto make = [&](LowerCtx& c) {
                int e = lower(c, bias, broadcast_idx(c, c.s->dim_idx, g_.node(bias).sizes, n.sizes));
                if (c.failed || beta == 1.0) return e;
                Expr k;
                k.kind = Expr::kConst;
                k.cls = value_class(n.dtype);
                k.f = beta;
                Expr m;
                m.kind = Expr::kOp;
                m.op = Op::kMul;
                m.cls = value_class(n.dtype);
                m.args[0] = e;
                m.args[1] = add_expr(c, k);
                return add_expr(c, m);
            };
            if (!place_pseudo(n.sizes, make, out, false)) return internal_error("fuse: addmm bias");
            st.f1 = 1.0;
        }
        st.refs = {to3d(a.value()), to3d(b.value()), to3d(whole(plan_, out))};
    }
    st.label = std::string(op_name(n.op)) + (n.source.empty() ? "" : " @ " + n.source);
    plan_.steps.push_back(st);
    producer_[v] = static_cast<int>(plan_.steps.size()) - 1;
    return {};
}

void Fuser::finalize() {
    for (KernelState& s : states_) {
        LowerCtx c;
        begin_attempt(c, s);
        const int zero = make_idx(c, Idx::kConst, 0, 0);
        for (int v : s.root_order) {
            const RootInfo& ri = s.roots[v];
            if (!needed_[v] || home_[v] < 0) continue;
            const int b = home_[v];
            std::vector<int> idx = ri.out_idx;
            for (int& i : idx) if (i < 0) i = zero;
            Store st;
            st.buffer = b;
            st.dtype = plan_.buffers[b].dtype;
            st.addr = address(c, idx, plan_.buffers[b].strides, plan_.buffers[b].sizes);
            st.expr = ri.expr;
            Phase& ph = c.k->phases[ri.phase];
            (ri.kind == RootInfo::kFull ? ph.stores : ph.post).push_back(st);
        }
    }
    for (size_t i = 0; i < plan_.steps.size(); ++i) {
        Step& st = plan_.steps[i];
        if (st.kind == Step::kKernel) {
            const Kernel& k = plan_.kernels[st.kernel];
            st.range = k.outer_count();
            const int64_t work = std::max<int64_t>(1, numel_of(k.inner)) * std::max<size_t>(1, k.phases.size()) *
                                 (1 + static_cast<int64_t>(k.exprs.size()) / 8);
            st.grain = std::max<int64_t>(1, runtime::kParallelGrain / work);
            // A column-form kernel reads each row in stretches of its thread chunk's width at
            // most: chunks as wide as its blocks, as long as every thread still gets one.
            if (const int64_t lanes = codegen::column_lanes(k); lanes > 0) {
                const int64_t threads = std::max(1, env::num_threads());
                st.grain = std::max(st.grain, std::min(lanes, (st.range + threads - 1) / threads));
            }
            for (const Phase& p : k.phases) {
                for (bool post : {false, true})
                    for (int e : phase_loads(k, p, post)) st.reads.push_back(k.exprs[e].buffer);
                for (const Store& s : p.stores) st.writes.push_back(s.buffer);
                for (const Store& s : p.post) st.writes.push_back(s.buffer);
            }
        } else if (st.kind == Step::kGemm) {
            st.reads = {st.refs[0].buffer, st.refs[1].buffer};
            if (st.f1 != 0.0) st.reads.push_back(st.refs[2].buffer);
            st.writes = {st.refs[2].buffer};
        } else {
            st.reads = {st.refs[0].buffer, st.refs[1].buffer, st.refs[2].buffer};
            if (st.refs.size() > 5) st.reads.push_back(st.refs[5].buffer);
            st.writes = {st.refs[3].buffer, st.refs[4].buffer};
        }
    }
    for (Kernel& k : plan_.kernels) plan_.kernel_names.push_back(k.name);
    label_kernel_steps();
    for (size_t v = 0; v < g_.nodes().size(); ++v) {
        const OpKind kind = op_kind(g_.node(static_cast<int>(v)).op);
        if (live_[v] && (is_pointwise(kind) || kind == OpKind::kReduce)) ++plan_.nodes_fused;
    }
}

// "ember_k3 mul+sigmoid+add @ model.py:12, model.py:13": the kernel, the ops whose results it
// writes, and the user's lines they came from, for the profiler's view of a compiled graph.
void Fuser::label_kernel_steps() {
    for (const KernelState& s : states_) {
        std::vector<std::string> ops, sources;
        auto add_unique = [](std::vector<std::string>& list, const std::string& x) {
            if (!x.empty() && std::find(list.begin(), list.end(), x) == list.end()) list.push_back(x);
        };
        for (int v : s.root_order) {
            add_unique(ops, op_name(g_.node(v).op));
            add_unique(sources, g_.node(v).source);
        }
        std::string label = plan_.kernels[s.kernel].name;
        for (size_t i = 0; i < ops.size() && i < 6; ++i) label += (i ? "+" : " ") + ops[i];
        if (ops.size() > 6) label += "+...";
        for (size_t i = 0; i < sources.size() && i < 4; ++i) label += (i ? ", " : " @ ") + sources[i];
        if (sources.size() > 4) label += ", ...";
        plan_.steps[s.step].label = std::move(label);
    }
}

void Fuser::check_aliases() {
    for (auto [v, ib] : aliases_) {
        bool safe = false;
        const int step = producer_[v];
        for (const KernelState& s : states_) {
            if (s.step != step) continue;
            auto it = s.roots.find(v);
            if (it == s.roots.end() || it->second.kind != RootInfo::kFull) break;
            const Kernel& k = plan_.kernels[s.kernel];
            const int phase = it->second.phase;
            int store_addr = -1, writers = 0;
            for (const Phase& p : k.phases)
                for (const auto* list : {&p.stores, &p.post})
                    for (const Store& st : *list)
                        if (st.buffer == ib) {
                            ++writers;
                            store_addr = st.addr;
                        }
            safe = writers == 1;
            for (size_t p = 0; p < k.phases.size() && safe; ++p) {
                for (bool post : {false, true}) {
                    for (int e : phase_loads(k, k.phases[p], post)) {
                        if (k.exprs[e].buffer != ib) continue;
                        const bool late = static_cast<int>(p) > phase || (post && static_cast<int>(p) >= phase);
                        if (late || k.exprs[e].addr != store_addr) safe = false;
                    }
                }
            }
            break;
        }
        for (size_t t = 0; t < plan_.steps.size() && safe; ++t) {
            if (static_cast<int>(t) == step) continue;
            const Step& st = plan_.steps[t];
            const bool writes = std::find(st.writes.begin(), st.writes.end(), ib) != st.writes.end();
            const bool reads = std::find(st.reads.begin(), st.reads.end(), ib) != st.reads.end();
            if (writes || (static_cast<int>(t) > step && reads)) safe = false;
        }
        if (!safe) unsafe_.push_back(v);
    }
}

Status Fuser::run() {
    const size_t nn = g_.nodes().size();
    users_.assign(nn, {});
    live_.assign(nn, 0);
    is_root_.assign(nn, 0);
    needed_.assign(nn, 0);
    home_.assign(nn, -1);
    producer_.assign(nn, -1);
    for (const Output& o : g_.outputs()) live_[o.value] = 1;
    for (size_t v = nn; v-- > 0;)
        if (live_[v])
            for (int in : g_.node(static_cast<int>(v)).inputs) live_[in] = 1;
    for (size_t v = 0; v < nn; ++v) {
        const Node& n = g_.node(static_cast<int>(v));
        if (!live_[v]) continue;
        std::vector<int> ins = n.inputs;
        std::sort(ins.begin(), ins.end());
        ins.erase(std::unique(ins.begin(), ins.end()), ins.end());
        for (int in : ins) users_[in].push_back(static_cast<int>(v));
    }
    plan_.num_inputs = g_.num_inputs();
    input_buffer_.assign(static_cast<size_t>(g_.num_inputs()), -1);
    for (size_t v = 0; v < nn; ++v) {
        const Node& n = g_.node(static_cast<int>(v));
        if (n.op == Op::kInput) {
            Buffer b;
            b.kind = Buffer::kInput;
            b.index = n.input_index;
            b.dtype = n.dtype;
            b.sizes = n.sizes;
            b.strides = n.strides;
            plan_.buffers.push_back(std::move(b));
            input_buffer_[n.input_index] = static_cast<int>(plan_.buffers.size()) - 1;
        } else if (n.op == Op::kConstant && !n.data.empty() && live_[v]) {
            Buffer b;
            b.kind = Buffer::kConstant;
            b.index = static_cast<int>(plan_.constants.size());
            b.dtype = n.dtype;
            b.sizes = n.sizes;
            b.strides = contiguous_strides(n.sizes);
            plan_.constants.push_back(n.data);
            plan_.buffers.push_back(std::move(b));
            home_[v] = static_cast<int>(plan_.buffers.size()) - 1;
        }
    }
    EMBER_RETURN_IF_ERROR(assign_homes());
    decide_roots();
    for (size_t v = 0; v < nn; ++v) {
        if (!live_[v]) continue;
        const Node& n = g_.node(static_cast<int>(v));
        const OpKind kind = op_kind(n.op);
        bool ok = true;
        if (kind == OpKind::kLibrary) EMBER_RETURN_IF_ERROR(process_library(static_cast<int>(v)));
        else if (kind == OpKind::kReduce || (is_pointwise(kind) && is_root_[v])) ok = place_root(static_cast<int>(v));
        else if (kind == OpKind::kComposite || kind == OpKind::kOpaque)
            return internal_error(std::string("fuse: op '") + op_name(n.op) + "' reached fusion undecomposed");
        if (!ok) return internal_error(std::string("fuse: could not place op '") + op_name(n.op) + "' at " + n.source);
    }
    for (auto [v, dest] : copies_) {
        const int src = v;
        if (!place_pseudo(g_.node(v).sizes, [&](LowerCtx& c) { return lower(c, src, c.s->dim_idx); }, dest, false))
            return internal_error("fuse: output copy");
    }
    late_barrier_ = static_cast<int>(states_.size());
    for (auto [v, dest] : late_copies_) {
        const int src = v;
        if (!place_pseudo(g_.node(v).sizes, [&](LowerCtx& c) { return lower(c, src, c.s->dim_idx); }, dest, true))
            return internal_error("fuse: in-place copy");
    }
    finalize();
    check_aliases();
    return {};
}

}  // namespace fusion

}  // namespace ember::compiler
