// reuse_values: a costly value that a kernel's loop computes in one phase and needs again in a
// later one is written once and read back, instead of computed twice. Softmax is the case that
// matters: phase 1 sums exp(x - max), phase 2 writes exp(x - max) / sum, and with a 32000-wide
// row the second exp made the compiled softmax twice as slow as the eager kernel.
//
// The value goes where the later phase will store its own result anyway: an output or scratch
// buffer of the same element type, stored once in the kernel at an address that differs for
// every point of the inner loop nest, and read nowhere else in the kernel. The earlier phase
// writes the value there; the later phases load it back at the same address (the row is still in
// cache) before the final store overwrites it. No new memory, and no change in rounding: the
// buffer holds the value's own register type (float32 for float32, float64 for float64).
#include <algorithm>
#include <map>

#include "compiler/passes/passes.h"

namespace ember::compiler {
namespace {

bool costly(Op op) {
    switch (op) {
        case Op::kExp: case Op::kLog: case Op::kSigmoid: case Op::kTanh: case Op::kSilu: case Op::kGelu:
        case Op::kGeluTanh: case Op::kSin: case Op::kCos: case Op::kErf: case Op::kPow:
            return true;
        default: return false;
    }
}

// Per expression: does it cost a transcendental call, and does it read memory (vary in the loop)?
struct Traits {
    std::vector<char> costly, varies;
};

Traits traits_of(const Kernel& k) {
    Traits t{std::vector<char>(k.exprs.size(), 0), std::vector<char>(k.exprs.size(), 0)};
    for (size_t e = 0; e < k.exprs.size(); ++e) {  // arguments precede their users
        const Expr& x = k.exprs[e];
        t.varies[e] = x.kind == Expr::kLoad || x.kind == Expr::kInRange;
        t.costly[e] = x.kind == Expr::kOp && costly(x.op);
        for (int a : x.args) {
            if (a < 0) continue;
            t.costly[e] |= t.costly[static_cast<size_t>(a)];
            t.varies[e] |= t.varies[static_cast<size_t>(a)];
        }
    }
    return t;
}

// Expressions a phase's loop evaluates (a reduction's result counts as a leaf there).
std::vector<char> evaluated(const Kernel& k, const Phase& p) {
    std::vector<char> seen(k.exprs.size(), 0);
    std::vector<int> stack;
    for (const Store& s : p.stores) stack.push_back(s.expr);
    for (int r : p.reductions) stack.push_back(k.reductions[static_cast<size_t>(r)].expr);
    while (!stack.empty()) {
        const int e = stack.back();
        stack.pop_back();
        if (e < 0 || seen[static_cast<size_t>(e)]) continue;
        seen[static_cast<size_t>(e)] = 1;
        const Expr& x = k.exprs[static_cast<size_t>(e)];
        if (x.kind == Expr::kReduced) continue;
        for (int a : x.args) stack.push_back(a);
    }
    return seen;
}

// Whether idx `i` mentions loop var `v`.
bool mentions(const Kernel& k, int i, int64_t v) {
    const Idx& x = k.idx[static_cast<size_t>(i)];
    switch (x.kind) {
        case Idx::kVar: return x.a == v;
        case Idx::kConst: return false;
        case Idx::kAdd: return mentions(k, static_cast<int>(x.a), v) || mentions(k, static_cast<int>(x.b), v);
        default: return mentions(k, static_cast<int>(x.a), v);
    }
}

// Stores that can hold a value for the loop: the only store to its buffer in the kernel, to a
// buffer the kernel never reads, that is not an input (in-place outputs share their input's
// buffer), at an address that moves with every inner var.
std::vector<const Store*> holders(const Kernel& k, const Plan& plan, size_t from_phase) {
    std::map<int, int> stores, loads;
    for (const Phase& p : k.phases)
        for (const auto* list : {&p.stores, &p.post})
            for (const Store& s : *list) ++stores[s.buffer];
    for (const Expr& x : k.exprs)
        if (x.kind == Expr::kLoad) ++loads[x.buffer];
    std::vector<const Store*> out;
    for (size_t q = from_phase; q < k.phases.size(); ++q) {
        for (const Store& s : k.phases[q].stores) {
            const Buffer& b = plan.buffers[static_cast<size_t>(s.buffer)];
            if (stores[s.buffer] != 1 || loads.count(s.buffer) ||
                (b.kind != Buffer::kOutput && b.kind != Buffer::kScratch))
                continue;
            bool moves = true;
            for (size_t d = 0; d < k.inner.size(); ++d)
                if (k.inner[d] > 1 && !mentions(k, s.addr, static_cast<int64_t>(k.outer.size() + d))) moves = false;
            if (moves) out.push_back(&s);
        }
    }
    return out;
}

DType holding_type(Cls c) { return c == Cls::kF64 ? DType::kFloat64 : DType::kFloat32; }

// Replaces `from` by `to` in the expression trees under `root`, copying the nodes on the way.
int substitute(Kernel& k, int root, const std::map<int, int>& repl, std::map<int, int>& memo) {
    if (root < 0) return root;
    if (auto it = repl.find(root); it != repl.end()) return it->second;
    if (auto it = memo.find(root); it != memo.end()) return it->second;
    Expr x = k.exprs[static_cast<size_t>(root)];
    int result = root;
    if (x.kind != Expr::kReduced) {
        bool changed = false;
        for (int& a : x.args) {
            const int n = substitute(k, a, repl, memo);
            changed |= n != a;
            a = n;
        }
        if (changed) {
            k.exprs.push_back(x);
            result = static_cast<int>(k.exprs.size()) - 1;
        }
    }
    memo[root] = result;
    return result;
}

void reuse_in(Kernel& k, const Plan& plan) {
    if (k.tail > 0 || k.phases.size() < 2) return;
    const Traits t = traits_of(k);
    std::vector<std::vector<char>> in_phase;
    for (const Phase& p : k.phases) in_phase.push_back(evaluated(k, p));
    // The candidates: evaluated in two phases' loops, costly, varying; the largest such trees only.
    const size_t ne = k.exprs.size();
    std::vector<int> first(ne, -1), last(ne, -1);
    for (size_t e = 0; e < ne; ++e)
        for (size_t q = 0; q < k.phases.size(); ++q)
            if (in_phase[q][e]) {
                if (first[e] < 0) first[e] = static_cast<int>(q);
                last[e] = static_cast<int>(q);
            }
    auto candidate = [&](size_t e) { return first[e] >= 0 && last[e] > first[e] && t.costly[e] && t.varies[e]; };
    std::vector<char> covered(ne, 0);  // under a chosen candidate
    std::vector<int> chosen;
    for (size_t e = ne; e-- > 0;) {
        if (covered[e] || !candidate(e) || k.exprs[e].kind != Expr::kOp) continue;
        chosen.push_back(static_cast<int>(e));
        std::vector<int> stack(std::begin(k.exprs[e].args), std::end(k.exprs[e].args));
        while (!stack.empty()) {
            const int a = stack.back();
            stack.pop_back();
            if (a < 0 || covered[static_cast<size_t>(a)]) continue;
            covered[static_cast<size_t>(a)] = 1;
            if (k.exprs[static_cast<size_t>(a)].kind == Expr::kReduced) continue;
            for (int b : k.exprs[static_cast<size_t>(a)].args) stack.push_back(b);
        }
    }
    std::vector<char> taken(plan.buffers.size(), 0);
    for (int e : chosen) {
        const Cls cls = k.exprs[static_cast<size_t>(e)].cls;
        if (!is_float_cls(cls)) continue;
        const Store* h = nullptr;
        for (const Store* s : holders(k, plan, static_cast<size_t>(last[e])))
            if (!taken[static_cast<size_t>(s->buffer)] && s->dtype == holding_type(cls)) { h = s; break; }
        if (!h) continue;
        taken[static_cast<size_t>(h->buffer)] = 1;
        Store keep{h->buffer, h->dtype, h->addr, e};
        Expr ld;
        ld.kind = Expr::kLoad;
        ld.cls = cls;
        ld.buffer = h->buffer;
        ld.dtype = h->dtype;
        ld.addr = h->addr;
        k.exprs.push_back(ld);
        const std::map<int, int> repl{{e, static_cast<int>(k.exprs.size()) - 1}};
        std::map<int, int> memo;
        for (size_t q = static_cast<size_t>(first[e]) + 1; q < k.phases.size(); ++q) {
            Phase& p = k.phases[q];
            for (Store& s : p.stores) s.expr = substitute(k, s.expr, repl, memo);
            for (int r : p.reductions) {
                Reduction& red = k.reductions[static_cast<size_t>(r)];
                red.expr = substitute(k, red.expr, repl, memo);
            }
        }
        k.phases[static_cast<size_t>(first[e])].stores.push_back(keep);
    }
}

}  // namespace

Status reuse_values(Plan& plan) {
    for (Kernel& k : plan.kernels) reuse_in(k, plan);
    return {};
}

}  // namespace ember::compiler
