// fuse_lower: turns graph values into a kernel's loop IR. An index is a vector of idx ids, one
// per dim of the value being read; views rewrite it on the way down (permute swaps entries,
// expand zeroes broadcast dims, reshape regroups through div/mod) until a buffer is reached,
// where it becomes an element offset. Index expressions are simplified with the bounds of the
// loop variables, so the common reshapes (merging or splitting contiguous dims) leave no div/mod
// in the innermost loop, which would keep LLVM from vectorizing it.
#include <algorithm>

#include "compiler/passes/fuse_internal.h"

namespace ember::compiler::fusion {

bool is_pointwise(OpKind k) {
    return k == OpKind::kUnary || k == OpKind::kBinary || k == OpKind::kCompare || k == OpKind::kWhere ||
           k == OpKind::kCast || k == OpKind::kFull || k == OpKind::kView;
}

int Fuser::make_idx(LowerCtx& c, Idx::Kind kind, int64_t a, int64_t b, int64_t clamp) {
    Kernel& k = *c.k;
    auto I = [&](int64_t id) -> const Idx& { return k.idx[static_cast<size_t>(id)]; };
    auto cnst = [&](int64_t v) { return make_idx(c, Idx::kConst, v, 0); };
    auto is_const = [&](int64_t id, int64_t v) { return I(id).kind == Idx::kConst && I(id).a == v; };
    int64_t hi = 1;
    switch (kind) {
        case Idx::kShift:
            if (b == 0 && I(a).hi <= clamp + 1) return static_cast<int>(a);  // nothing to shift or clamp
            hi = clamp + 1;
            break;
        case Idx::kConst: hi = a + 1; break;
        case Idx::kVar: {
            const size_t no = k.outer.size();
            hi = std::max<int64_t>(1, static_cast<size_t>(a) < no ? k.outer[a] : k.inner[a - no]);
            break;
        }
        case Idx::kAdd:
            if (I(a).kind == Idx::kConst && I(b).kind == Idx::kConst) return cnst(I(a).a + I(b).a);
            if (is_const(a, 0)) return static_cast<int>(b);
            if (is_const(b, 0)) return static_cast<int>(a);
            if (int r = recombine(c, a, b); r >= 0) return r;
            if (a > b) std::swap(a, b);
            hi = I(a).hi + I(b).hi - 1;
            break;
        case Idx::kMul:
            if (b == 0 || is_const(a, 0)) return cnst(0);
            if (b == 1) return static_cast<int>(a);
            if (I(a).kind == Idx::kConst) return cnst(I(a).a * b);
            if (I(a).kind == Idx::kMul) return make_idx(c, Idx::kMul, I(a).a, I(a).b * b);
            hi = (I(a).hi - 1) * b + 1;
            break;
        case Idx::kDiv: {
            if (b == 1) return static_cast<int>(a);
            if (I(a).hi <= b) return cnst(0);
            if (I(a).kind == Idx::kConst) return cnst(I(a).a / b);
            if (I(a).kind == Idx::kMul && I(a).b % b == 0) return make_idx(c, Idx::kMul, I(a).a, I(a).b / b);
            if (I(a).kind == Idx::kAdd) {
                // (x*m*b + q) / b == x*m when q < b
                for (int side = 0; side < 2; ++side) {
                    const int64_t p = side ? I(a).b : I(a).a, q = side ? I(a).a : I(a).b;
                    if (I(p).kind == Idx::kMul && I(p).b % b == 0 && I(q).hi <= b)
                        return make_idx(c, Idx::kMul, I(p).a, I(p).b / b);
                }
            }
            hi = (I(a).hi - 1) / b + 1;
            break;
        }
        case Idx::kMod: {
            if (b == 1) return cnst(0);
            if (I(a).hi <= b) return static_cast<int>(a);
            if (I(a).kind == Idx::kConst) return cnst(I(a).a % b);
            if (I(a).kind == Idx::kMul && I(a).b % b == 0) return cnst(0);
            if (I(a).kind == Idx::kAdd) {
                for (int side = 0; side < 2; ++side) {
                    const int64_t p = side ? I(a).b : I(a).a, q = side ? I(a).a : I(a).b;
                    if (I(p).kind == Idx::kMul && I(p).b % b == 0) return make_idx(c, Idx::kMod, q, b);
                }
            }
            hi = std::min(b, I(a).hi);
            break;
        }
    }
    // A shift's two constants share the key's last slot (both are sizes, far below 2^32).
    auto key = std::make_tuple(static_cast<int>(kind), a, kind == Idx::kShift ? (b << 32) | clamp : b);
    auto it = c.s->idx_cons.find(key);
    if (it != c.s->idx_cons.end()) return it->second;
    Idx x;
    x.kind = kind;
    x.a = a;
    x.b = b;
    x.hi = hi;
    x.c = clamp;
    k.idx.push_back(x);
    const int id = static_cast<int>(k.idx.size()) - 1;
    c.s->idx_cons.emplace(key, id);
    c.new_idx_keys.push_back(key);
    return id;
}

// (x%m)*s + (x/m)*(m*s) == x*s: a reshape that splits a dim and one that merges it back (or a
// permute-free view chain through them) leave this pair; folding it removes the div/mod that
// would keep the innermost loop scalar. Also looks one level into an add on either side.
int Fuser::recombine(LowerCtx& c, int64_t a, int64_t b) {
    Kernel& k = *c.k;
    auto I = [&](int64_t id) -> const Idx& { return k.idx[static_cast<size_t>(id)]; };
    // term = (base op m) * scale, op in {mod, div}
    auto split = [&](int64_t id, Idx::Kind op, int64_t* x, int64_t* m, int64_t* scale) {
        int64_t t = id, sc = 1;
        if (I(t).kind == Idx::kMul) { sc = I(t).b; t = I(t).a; }
        if (I(t).kind != op) return false;
        *x = I(t).a; *m = I(t).b; *scale = sc;
        return true;
    };
    auto pair = [&](int64_t p, int64_t q) {
        int64_t x1, m1, s1, x2, m2, s2;
        if (split(p, Idx::kMod, &x1, &m1, &s1) && split(q, Idx::kDiv, &x2, &m2, &s2) && x1 == x2 && m1 == m2 &&
            s2 == m1 * s1)
            return make_idx(c, Idx::kMul, x1, s1);
        return -1;
    };
    for (int side = 0; side < 2; ++side) {
        const int64_t p = side ? b : a, q = side ? a : b;
        if (int r = pair(p, q); r >= 0) return r;
        if (int r = pair(q, p); r >= 0) return r;
        // (y + p) + q with p, q a pair: y + x*s
        if (I(p).kind == Idx::kAdd) {
            for (int s2 = 0; s2 < 2; ++s2) {
                const int64_t in = s2 ? I(p).b : I(p).a, rest = s2 ? I(p).a : I(p).b;
                int r = pair(in, q);
                if (r < 0) r = pair(q, in);
                if (r >= 0) return make_idx(c, Idx::kAdd, rest, r);
            }
        }
    }
    return -1;
}

int Fuser::add_expr(LowerCtx& c, Expr e) {
    c.k->exprs.push_back(e);
    return static_cast<int>(c.k->exprs.size()) - 1;
}

int Fuser::address(LowerCtx& c, const std::vector<int>& idx, const std::vector<int64_t>& strides,
                   const std::vector<int64_t>& sizes) {
    int addr = make_idx(c, Idx::kConst, 0, 0);
    for (size_t d = 0; d < idx.size(); ++d) {
        if (sizes[d] == 1 || strides[d] == 0) continue;
        addr = make_idx(c, Idx::kAdd, addr, make_idx(c, Idx::kMul, idx[d], strides[d]));
    }
    return addr;
}

std::vector<int> Fuser::broadcast_idx(LowerCtx& c, const std::vector<int>& idx, const std::vector<int64_t>& from,
                                      const std::vector<int64_t>& to) {
    // `idx` indexes shape `to`; return the index into `from`, which broadcasts to `to`.
    std::vector<int> r(from.size());
    const size_t lead = to.size() - from.size();
    for (size_t i = 0; i < from.size(); ++i)
        r[i] = from[i] == 1 ? make_idx(c, Idx::kConst, 0, 0) : idx[lead + i];
    return r;
}

std::vector<int> Fuser::view_idx(LowerCtx& c, const Node& n, const std::vector<int>& idx) {
    const auto& in = g_.node(n.inputs[0]).sizes;
    const auto& out = n.sizes;
    const int64_t ri = static_cast<int64_t>(in.size());
    const int zero = make_idx(c, Idx::kConst, 0, 0);
    auto norm = [](int64_t d, int64_t rank) { return d < 0 ? d + rank : d; };
    std::vector<int> r(in.size(), zero);
    switch (n.op) {
        case Op::kExpand: return broadcast_idx(c, idx, in, out);
        case Op::kPermute:
            for (size_t i = 0; i < n.attrs.ints.size(); ++i) r[norm(n.attrs.ints[i], ri)] = idx[i];
            return r;
        case Op::kTranspose: {
            r = idx;
            if (ri) std::swap(r[norm(n.attrs.ints[0], ri)], r[norm(n.attrs.ints[1], ri)]);
            return r;
        }
        case Op::kSlice: {
            r = idx;
            const int64_t d = norm(n.attrs.ints[0], ri);
            int64_t start = n.attrs.ints[1];
            if (start < 0) start += in[d];
            start = std::clamp<int64_t>(start, 0, in[d]);
            r[d] = make_idx(c, Idx::kAdd, make_idx(c, Idx::kConst, start, 0),
                            make_idx(c, Idx::kMul, idx[d], n.attrs.ints[3]));
            return r;
        }
        case Op::kSqueeze: {
            std::vector<bool> drop(in.size(), n.attrs.ints.empty());
            for (int64_t d : n.attrs.ints) drop[norm(d, ri)] = true;
            size_t o = 0;
            for (size_t i = 0; i < in.size(); ++i) r[i] = (drop[i] && in[i] == 1) ? zero : idx[o++];
            return r;
        }
        case Op::kUnsqueeze: {
            const int64_t d = norm(n.attrs.ints[0], ri + 1);
            r.clear();
            for (size_t i = 0; i < idx.size(); ++i)
                if (static_cast<int64_t>(i) != d) r.push_back(idx[i]);
            return r;
        }
        case Op::kReshape: {
            if (numel_of(in) == 0) return r;
            // Pair up runs of input and output dims with equal products; within a run, the input
            // index is the run's linear index split by the input sizes.
            size_t i = 0, o = 0;
            while (i < in.size() || o < out.size()) {
                if (i < in.size() && in[i] == 1) { ++i; continue; }
                if (o < out.size() && out[o] == 1) { ++o; continue; }
                if (i >= in.size() || o >= out.size()) break;
                const size_t i0 = i, o0 = o;
                int64_t pi = in[i++], po = out[o++];
                while (pi != po) {
                    if (pi < po && i < in.size()) pi *= in[i++];
                    else if (po < pi && o < out.size()) po *= out[o++];
                    else break;
                }
                int lin = zero;
                int64_t stride = 1;
                for (size_t d = o; d-- > o0;) {
                    lin = make_idx(c, Idx::kAdd, lin, make_idx(c, Idx::kMul, idx[d], stride));
                    stride *= out[d];
                }
                stride = 1;
                for (size_t d = i; d-- > i0;) {
                    r[d] = make_idx(c, Idx::kMod, make_idx(c, Idx::kDiv, lin, stride), in[d]);
                    stride *= in[d];
                }
            }
            return r;
        }
        default: return r;
    }
}

int Fuser::lower(LowerCtx& c, int v, const std::vector<int>& idx) {
    if (c.failed) return -1;
    auto key = std::make_tuple(v, c.outer_scope, idx);
    auto m = c.s->memo.find(key);
    if (m != c.s->memo.end()) {
        c.level = std::max(c.level, m->second.second);
        return m->second.first;
    }
    const int saved = c.level;
    c.level = 0;
    int e = -1;
    auto r = c.s->roots.find(v);
    if (r != c.s->roots.end()) {
        const RootInfo& ri = r->second;
        if (c.outer_scope && ri.kind == RootInfo::kFull) {
            c.failed = true;
            return -1;
        }
        for (size_t d = 0; d < idx.size() && d < ri.out_idx.size(); ++d) {
            if (ri.out_idx[d] >= 0 && idx[d] != ri.out_idx[d]) {
                c.failed = true;  // read at another row of this kernel: a race
                return -1;
            }
        }
        e = ri.expr;
        c.level = ri.kind == RootInfo::kFull ? ri.phase : ri.phase + 1;
    } else if (producer_[v] >= 0) {
        if (producer_[v] > c.s->step) {
            c.failed = true;
            return -1;
        }
        const int b = home(v);
        c.needs.push_back(v);
        Expr x;
        x.kind = Expr::kLoad;
        x.buffer = b;
        x.dtype = plan_.buffers[b].dtype;
        x.cls = value_class(x.dtype);
        x.addr = address(c, idx, plan_.buffers[b].strides, plan_.buffers[b].sizes);
        e = add_expr(c, x);
    } else {
        e = lower_def(c, v, idx);
    }
    if (c.failed) return -1;
    c.s->memo.emplace(key, std::make_pair(e, c.level));
    c.new_memo_keys.push_back(key);
    c.level = std::max(saved, c.level);
    return e;
}

int Fuser::lower_def(LowerCtx& c, int v, const std::vector<int>& idx) {
    const Node& n = g_.node(v);
    Expr x;
    x.cls = value_class(n.dtype);
    switch (op_kind(n.op)) {
        case OpKind::kLeaf: {
            if (n.is_scalar_constant()) {
                x.kind = Expr::kConst;
                x.f = n.attrs.floats.empty() ? 0.0 : n.attrs.floats[0];
                x.i = n.attrs.ints.empty() ? static_cast<int64_t>(x.f) : n.attrs.ints[0];
                return add_expr(c, x);
            }
            const int b = n.op == Op::kInput ? input_buffer_[n.input_index] : home_[v];
            x.kind = Expr::kLoad;
            x.buffer = b;
            x.dtype = n.dtype;
            x.addr = address(c, idx, plan_.buffers[b].strides, plan_.buffers[b].sizes);
            return add_expr(c, x);
        }
        case OpKind::kFull:
            x.kind = Expr::kConst;
            x.f = n.attrs.floats.empty() ? 0.0 : n.attrs.floats[0];
            // An integer fill carries its exact value in ints: a double holds only 53 bits.
            x.i = n.attrs.ints.empty() ? static_cast<int64_t>(x.f) : n.attrs.ints[0];
            return add_expr(c, x);
        case OpKind::kView:
            if (n.op == Op::kPad) return lower_pad(c, n, idx);
            return lower(c, n.inputs[0], view_idx(c, n, idx));
        case OpKind::kUnary:
        case OpKind::kBinary:
        case OpKind::kCompare:
        case OpKind::kWhere:
        case OpKind::kCast: {
            x.kind = Expr::kOp;
            x.op = n.op;
            // A cast's target type; a power's result type (its float16 roots are std::pow's).
            if (n.op == Op::kCast || n.op == Op::kPow) x.dtype = n.dtype;
            for (size_t i = 0; i < n.inputs.size() && i < 3; ++i) {
                const Node& in = g_.node(n.inputs[i]);
                x.args[i] = lower(c, n.inputs[i], broadcast_idx(c, idx, in.sizes, n.sizes));
                if (c.failed) return -1;
            }
            return add_expr(c, x);
        }
        default:
            c.failed = true;  // a reduction or library value that was not realized: a fuse bug
            return -1;
    }
}

// pad: where(every padded dim's index is on the input's grid, input[(i - lo) / step], value). The
// source index is clamped, so a masked-off element still reads inside the input's buffer.
int Fuser::lower_pad(LowerCtx& c, const Node& n, const std::vector<int>& idx) {
    const auto& in = g_.node(n.inputs[0]).sizes;
    const auto& p = n.attrs.ints;
    Expr fill;
    fill.kind = Expr::kConst;
    fill.cls = value_class(n.dtype);
    fill.f = n.attrs.floats[0];
    fill.i = static_cast<int64_t>(fill.f);
    std::vector<int> src(idx.size());
    int cond = -1;
    for (size_t d = 0; d < in.size(); ++d) {
        const int64_t lo = p[3 * d], hi = p[3 * d + 1], step = p[3 * d + 2];
        if (lo == 0 && hi == 0 && step == 1) {
            src[d] = idx[d];
            continue;
        }
        if (in[d] == 0) return add_expr(c, fill);  // nothing of the input shows
        const int64_t last = (in[d] - 1) * step;  // offset of the input's last element from lo
        int s = make_idx(c, Idx::kShift, idx[d], lo, last);
        src[d] = step == 1 ? s : make_idx(c, Idx::kDiv, s, step);
        Expr r;
        r.kind = Expr::kInRange;
        r.cls = Cls::kBool;
        r.addr = idx[d];
        r.lo = lo;
        r.hi = lo + last + 1;
        r.step = step;
        const int e = add_expr(c, r);
        if (cond < 0) {
            cond = e;
        } else {
            Expr both;
            both.kind = Expr::kOp;
            both.op = Op::kAnd;
            both.cls = Cls::kBool;
            both.args[0] = cond;
            both.args[1] = e;
            cond = add_expr(c, both);
        }
    }
    const int value = lower(c, n.inputs[0], src);
    if (c.failed) return -1;
    if (cond < 0) return value;
    Expr w;
    w.kind = Expr::kOp;
    w.op = Op::kWhere;
    w.cls = fill.cls;
    w.args[0] = cond;
    w.args[1] = value;
    w.args[2] = add_expr(c, fill);
    return add_expr(c, w);
}

bool Fuser::begin_attempt(LowerCtx& c, KernelState& s) {
    c = LowerCtx{};
    c.s = &s;
    c.k = &plan_.kernels[static_cast<size_t>(s.kernel)];
    return true;
}

void Fuser::rollback(LowerCtx& c, size_t nidx, size_t nexpr, size_t nred) {
    for (const auto& key : c.new_memo_keys) c.s->memo.erase(key);
    for (const auto& key : c.new_idx_keys) c.s->idx_cons.erase(key);
    c.k->idx.resize(nidx);
    c.k->exprs.resize(nexpr);
    c.k->reductions.resize(nred);
}

}  // namespace ember::compiler::fusion
