// See column_form.h.
#include "compiler/codegen/column_form.h"

#include <algorithm>

namespace ember::compiler::codegen {

int64_t coef(const Kernel& k, int i, size_t v) {
    const Idx& x = k.idx[static_cast<size_t>(i)];
    switch (x.kind) {
        case Idx::kVar: return static_cast<size_t>(x.a) == v ? 1 : 0;
        case Idx::kConst: return 0;
        default: break;
    }
    const int64_t a = coef(k, static_cast<int>(x.a), v);
    if (x.kind == Idx::kMul) return a < 0 ? -1 : a * x.b;
    if (x.kind != Idx::kAdd) return a == 0 ? 0 : -1;  // div, mod, shift
    const int64_t b = coef(k, static_cast<int>(x.b), v);
    return a < 0 || b < 0 ? -1 : a + b;
}

// The column form pays when fewer memory accesses stride through memory across its lanes (the
// last outer var) than across the row form's innermost inner var. An access is strided along a
// var when its coefficient is neither 0 (invariant: a broadcast) nor 1 (contiguous), or when the
// var sits under a div or mod. Counting strided accesses, not contiguous ones, matters for
// kernels that also read small per-row values: the weight gradient of a layer norm reads two
// [rows, cols] tensors down their columns and the rows' mean and rstd, and in the row form the
// two big reads would each touch a new cache line per element. Ties go to the form with more
// contiguous accesses along its var.
int64_t column_lanes(const Kernel& k) {
    const size_t no = k.outer.size(), ni = k.inner.size();
    if (k.tail > 0 || no == 0 || ni == 0 || k.outer.back() < 8) return 0;
    const size_t vo = no - 1, vi = no + ni - 1;
    const bool inner_varies = k.inner.back() > 1;
    int unit_o = 0, unit_i = 0, strided_o = 0, strided_i = 0;
    auto count = [&](int addr) {
        const int64_t co = coef(k, addr, vo), ci = coef(k, addr, vi);
        unit_o += co == 1;
        strided_o += co != 0 && co != 1;
        if (!inner_varies) return;
        unit_i += ci == 1;
        strided_i += ci != 0 && ci != 1;
    };
    for (const Expr& x : k.exprs)
        if (x.kind == Expr::kLoad) count(x.addr);
    for (const Phase& p : k.phases)
        for (const Store& s : p.stores) count(s.addr);
    const bool column = strided_o != strided_i ? strided_o < strided_i : unit_o > unit_i;
    return column ? std::min<int64_t>(kColumnLanes, k.outer.back()) : 0;
}

}  // namespace ember::compiler::codegen
