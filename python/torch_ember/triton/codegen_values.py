"""TTIR op handlers for values: constants, comparisons and selects, program ids and ranges,
shape ops (splat, broadcast, reshape, trans, join, split), pointer arithmetic, masked loads and
stores, atomics, tt.dot, reductions and scans, and the extern math calls. Each registers itself
with codegen.handles; codegen.py holds the translator they write into."""
from __future__ import annotations

import math
import re

from .codegen import (
    Lazy, Op, Translator, Ty, V, _CMPF, _CMPI, _EXTERN_MATH, _cast, _flat, _is_float, _literal,
    _parse_scalar_literal, ctype, find_top, ftype, handles, math_call, parse_type, utype,
)


@handles("arith.constant")
def _constant(t: Translator, op: Op):
    k = find_top(op.body, " : ")
    if k >= 0:
        val, ty = op.body[:k].strip(), parse_type(op.body[k + 3:])
    else:
        val, ty = op.body.strip(), Ty("i1")
    if val.startswith("dense<"):
        inner = val[len("dense<"):-1].strip()
        if inner.startswith("["):
            flat = re.findall(r"[^\[\],\s]+", inner)
            vals = [_parse_scalar_literal(x, ty.elem) for x in flat]
            v = t.alloc(ty, op.results[0])
            for i, x in enumerate(vals):
                t.emit(f"{v.name}[{i}] = {_literal(x, ty.elem)};")
            t.env[op.results[0]] = v
            return
        lit = _literal(_parse_scalar_literal(inner, ty.elem), ty.elem)
        t.define(op.results[0], ty, lambda i: lit, lazy=True)
        return
    lit = _literal(_parse_scalar_literal(val, ty.elem), ty.elem)
    v = V(t.fresh(op.results[0]), ty)
    t.emit(f"const {ctype(ty)} {v.name} = {lit};")
    t.env[op.results[0]] = v


@handles("ub.poison")
def _poison(t: Translator, op: Op):
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"{ctype(ty.scalar())}{{}}", lazy=True)


@handles("arith.cmpi", "arith.cmpf")
def _cmp(t: Translator, op: Op):
    pred = op.body.split(",", 1)[0].strip()
    a, b = (t.get_lazy(x, op) for x in op.operands())
    ty = a.ty.with_elem("i1")
    if op.name == "arith.cmpi":
        if pred not in _CMPI:
            t.unsupported(op, pred)
        o = _CMPI[pred]
        if pred.startswith("u"):
            u = utype(a.ty.elem) if a.ty.elem != "ptr" else "uintptr_t"
            t.define(op.results[0], ty, lambda i: f"(({u}){a.at(i)} {o} ({u}){b.at(i)})", lazy=True)
        else:
            t.define(op.results[0], ty, lambda i: f"({a.at(i)} {o} {b.at(i)})", lazy=True)
    else:
        if pred not in _CMPF:
            t.unsupported(op, pred)
        f = _CMPF[pred]
        t.define(op.results[0], ty, lambda i: f.format(x=a.at(i), y=b.at(i)), lazy=True)


@handles("arith.select")
def _select(t: Translator, op: Op):
    c, a, b = (t.get_lazy(x, op) for x in op.operands())
    ty = t.result_type(op)
    if ty.elem in ("f16", "bf16"):
        t.define(op.results[0], ty, lambda i: f"({c.at(i)} ? {a.raw(i)} : {b.raw(i)})", lazy=True)
    else:
        t.define(op.results[0], ty, lambda i: f"({c.at(i)} ? {a.at(i)} : {b.at(i)})", lazy=True)


@handles("tt.get_program_id", "tt.get_num_programs")
def _pid(t: Translator, op: Op):
    axis = op.body.split()[0]
    k = "xyz".index(axis) if axis in "xyz" else int(axis)
    pre = "pid" if op.name == "tt.get_program_id" else "np"
    t.env[op.results[0]] = V(f"{pre}{k}", Ty("i32"))


@handles("tt.make_range")
def _make_range(t: Translator, op: Op):
    start = int(op.attr("start").split(":")[0])
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"({ctype(ty.scalar())})({start} + {i})", lazy=True)


@handles("tt.splat")
def _splat(t: Translator, op: Op):
    (src,) = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: src.name, lazy=True)


@handles("tt.expand_dims", "tt.reshape")
def _reshape(t: Translator, op: Op):
    (src,) = (t.get_lazy(x, op) for x in op.operands())
    ty = t.result_type(op)
    if op.name == "tt.reshape" and "efficient_layout" not in op.body and "allow_reorder" in op.body:
        pass  # any element order is allowed; keep row-major
    t.env[op.results[0]] = Lazy(ty, src.expr) if isinstance(src, Lazy) else V(src.name, ty)


@handles("tt.broadcast")
def _broadcast(t: Translator, op: Op):
    (src,) = (t.get_lazy(x, op) for x in op.operands())
    ty = t.result_type(op)
    if src.ty.shape == ty.shape:
        t.env[op.results[0]] = Lazy(ty, src.expr) if isinstance(src, Lazy) else V(src.name, ty)
        return
    t.define(op.results[0], ty, lambda i: src.raw(_broadcast_index(i, ty.shape, src.ty.shape)), lazy=True)


def _broadcast_index(i: str, shape, src_shape) -> str:
    """The flat index into a block of `src_shape` (size-1 dims broadcast) read by the element of
    flat index `i` in a block of `shape`."""
    terms = []
    stride, src_stride = 1, 1
    for k in reversed(range(len(shape))):
        if src_shape[k] != 1:
            coord = f"({i})" if stride == 1 else f"(({i}) / {stride})"
            if k > 0:
                coord = f"({coord} % {shape[k]})"
            terms.append(coord if src_stride == 1 else f"{coord} * {src_stride}")
        stride *= shape[k]
        src_stride *= src_shape[k]
    return " + ".join(reversed(terms)) or "0"


@handles("tt.trans")
def _trans(t: Translator, op: Op):
    (src,) = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    order = [int(x) for x in re.search(r"order = array<i32:([^>]*)>", op.body).group(1).split(",")]
    v = t.alloc(ty, op.results[0])
    d = [f"_j{k}" for k in range(len(ty.shape))]
    s = [None] * len(order)
    for k, o in enumerate(order):
        s[o] = d[k]
    t.nested(ty.shape, f"{v.name}[{_flat(d, ty.shape)}] = {src.name}[{_flat(s, src.ty.shape)}];")
    t.env[op.results[0]] = v


@handles("tt.join")
def _join(t: Translator, op: Op):
    a, b = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    v = t.alloc(ty, op.results[0])
    n = a.ty.numel
    t.emit(f"for (int _i = 0; _i < {n}; ++_i) {{ {v.name}[2 * _i] = {a.name}[_i]; {v.name}[2 * _i + 1] = {b.name}[_i]; }}")
    t.env[op.results[0]] = v


@handles("tt.split")
def _split(t: Translator, op: Op):
    (a,) = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    outs = []
    for r in op.results:
        outs.append(t.alloc(ty, r))
        t.env[r] = outs[-1]
    n = ty.numel
    t.emit(f"for (int _i = 0; _i < {n}; ++_i) {{ {outs[0].name}[_i] = {a.name}[2 * _i]; {outs[1].name}[_i] = {a.name}[2 * _i + 1]; }}")


@handles("tt.addptr")
def _addptr(t: Translator, op: Op):
    p, off = (t.get_lazy(x, op) for x in op.operands())
    ty = p.ty if p.ty.is_tensor or not off.ty.is_tensor else p.ty.with_shape(off.ty.shape)
    t.define(op.results[0], ty, lambda i: f"({p.at(i)} + {off.at(i)})", lazy=True)


@handles("tt.load")
def _load(t: Translator, op: Op):
    if "boundaryCheck" in op.body or "padding" in op.body:
        t.unsupported(op, "block pointers (tl.make_block_ptr)")
    ins = [t.get_lazy(x, op) for x in op.operands()]
    ptr = ins[0]
    if ptr.ty.pointee is None:
        t.unsupported(op, "load through a tensor descriptor or block pointer")
    ty = Ty(ptr.ty.pointee.elem, ptr.ty.shape, ptr.ty.pointee.pointee)
    c = ctype(ty.scalar())

    def raw(v, i):
        return v.raw(i)

    if len(ins) == 1:
        t.define(op.results[0], ty, lambda i: f"*{raw(ptr, i)}")
    elif len(ins) == 2:
        m = ins[1]
        t.define(op.results[0], ty, lambda i: f"({raw(m, i)} ? *{raw(ptr, i)} : {c}{{}})")
    else:
        m, other = ins[1], ins[2]
        t.define(op.results[0], ty, lambda i: f"({raw(m, i)} ? *{raw(ptr, i)} : ({c}){raw(other, i)})")


@handles("tt.store")
def _store(t: Translator, op: Op):
    if "boundaryCheck" in op.body:
        t.unsupported(op, "block pointers (tl.make_block_ptr)")
    ins = [t.get_lazy(x, op) for x in op.operands()]
    ptr, val = ins[0], ins[1]
    if ptr.ty.pointee is None:
        t.unsupported(op, "store through a tensor descriptor or block pointer")
    c = ctype(ptr.ty.pointee)

    def raw(v, i):
        return v.raw(i)

    mask = ins[2] if len(ins) > 2 else None
    n = ptr.ty.numel if ptr.ty.is_tensor else 1
    guard = (lambda i: f"if ({raw(mask, i)}) ") if mask is not None else (lambda i: "")
    if ptr.ty.is_tensor:
        t.emit(f"for (int _i = 0; _i < {n}; ++_i) {{ {guard('_i')}*{raw(ptr, '_i')} = ({c}){raw(val, '_i')}; }}")
    else:
        t.emit(f"{{ {guard('0')}*{ptr.name} = ({c}){raw(val, '0')}; }}")


_RMW = {
    "add": "return (T)(o + v);", "fadd": "return (T)((float)o + (float)v);",
    "max": "return (T)(o < v ? v : o);", "min": "return (T)(v < o ? v : o);",
    "umax": "using U = std::make_unsigned<T>::type; return (T)((U)o < (U)v ? v : o);",
    "umin": "using U = std::make_unsigned<T>::type; return (T)((U)v < (U)o ? v : o);",
    "and": "return (T)(o & v);", "or": "return (T)(o | v);", "xor": "return (T)(o ^ v);",
    "exch": "(void)o; return v;", "xchg": "(void)o; return v;",
}


@handles("tt.atomic_rmw")
def _atomic_rmw(t: Translator, op: Op):
    kind = op.body.split(",", 1)[0].strip()
    if kind not in _RMW:
        t.unsupported(op, kind)
    ins = [t.get(x, op) for x in op.operands()]
    ptr, val = ins[0], ins[1]
    mask = ins[2] if len(ins) > 2 else None
    ety = ptr.ty.pointee
    c = ctype(ety)
    body = _RMW[kind]
    if kind == "fadd" and ety.elem == "f64":
        body = "return o + v;"
    fn = t.fresh("rmw")
    t.emit(f"auto {fn} = []({c} o, {c} v) -> {c} {{ using T = {c}; {body} }};")

    def raw(v, i):
        return f"{v.name}[{i}]" if v.ty.is_tensor else v.name

    rty = ety.with_shape(ptr.ty.shape)
    if op.results:
        if rty.is_tensor:
            r = t.alloc(rty, op.results[0])
            dst = lambda i: f"{r.name}[{i}]"
        else:
            r = V(t.fresh(op.results[0]), rty)
            t.emit(f"{c} {r.name}{{}};")
            dst = lambda i: r.name
        t.env[op.results[0]] = r
    else:
        dst = None
    n = ptr.ty.numel if ptr.ty.is_tensor else 1
    i = "_i" if ptr.ty.is_tensor else "0"
    guard = f"if ({raw(mask, i)}) " if mask is not None else ""
    assign = f"{dst(i)} = " if dst else ""
    stmt = f"{guard}{{ {assign}em::atomic_rmw<{c}>({raw(ptr, i)}, ({c}){raw(val, i)}, {fn}); }}"
    if ptr.ty.is_tensor:
        t.emit(f"for (int _i = 0; _i < {n}; ++_i) {stmt}")
    else:
        t.emit(stmt)


@handles("tt.atomic_cas")
def _atomic_cas(t: Translator, op: Op):
    ptr, cmp, val = (t.get(x, op) for x in op.operands())
    ety = ptr.ty.pointee
    c = ctype(ety)
    rty = ety.with_shape(ptr.ty.shape)

    def raw(v, i):
        return f"{v.name}[{i}]" if v.ty.is_tensor else v.name

    t.define(op.results[0], rty,
             lambda i: f"em::atomic_cas<{c}>({raw(ptr, i)}, ({c}){raw(cmp, i)}, ({c}){raw(val, i)})")


@handles("tt.dot")
def _dot(t: Translator, op: Op):
    names = op.operands()
    a, b, c = (t.get(x, op) for x in names)
    ty = t.result_type(op)
    if len(a.ty.shape) != 2 or len(b.ty.shape) != 2:
        t.unsupported(op, "batched (3-D) dot")
    if any(e.startswith("f8") for e in (a.ty.elem, b.ty.elem)):
        t.unsupported(op, "fp8 operands")
    M, K = a.ty.shape
    N = b.ty.shape[1]
    # The accumulator of a tiled loop (a carried buffer this dot is the only reader of) is
    # updated in place: no copy into a new block here and none back at the yield.
    carried = t.yield_stack and t.yield_stack[-1][0] == "for" and any(c is x for x in t.yield_stack[-1][1])
    in_place = carried and t.uses.get(names[2], 0) == 1 and c.ty == ty
    v = c if in_place else t.alloc(ty, op.results[0])
    t.emit(f"em::dot<{M}, {N}, {K}>({a.name}, {b.name}, {c.name}, {v.name});")
    t.env[op.results[0]] = v


@handles("tt.dot_scaled")
def _dot_scaled(t: Translator, op: Op):
    t.unsupported(op, "tl.dot_scaled")


def _reduce_or_scan(t: Translator, op: Op, scan: bool):
    ins = [t.get(x, op) for x in op.operands(op.body)]
    axis = int(re.search(r"axis = (\d+)", op.body).group(1))
    reverse = scan and "reverse = true" in op.body
    shape = ins[0].ty.shape
    P = math.prod(shape[:axis])
    R = shape[axis]
    Q = math.prod(shape[axis + 1:])
    out_tys = t.result_types(op)
    if len(op.regions) != 1 or len(op.regions[0]) != 1:
        t.unsupported(op, "combine region with several blocks")
    block = op.regions[0][0]
    term = block.ops[-1]
    if term.name not in ("tt.reduce.return", "tt.scan.return"):
        t.unsupported(term, "combine region terminator")
    outs = []
    for r, oty in zip(op.results, out_tys):
        if oty.is_tensor:
            outs.append(t.alloc(oty, r))
        else:
            v = V(t.fresh(r), oty)
            t.emit(f"{ctype(oty)} {v.name}{{}};")
            outs.append(v)
        t.env[r] = outs[-1]
    if scan:
        _scan_loops(t, ins, outs, block, term, P, R, Q, reverse)
    elif Q > 1:
        _reduce_columns(t, ins, outs, block, term, P, R, Q)
    else:
        _reduce_rows(t, ins, outs, block, term, P, R)


def _combine(t: Translator, block, term, ins, accs: list[str], xs: list[str]) -> list[str]:
    """Emits the combine region on scalars `accs` (running values) and `xs` (new elements);
    returns the names holding the combined values."""
    k = len(ins)
    saved = dict(t.env)
    for j in range(k):
        t.env[block.args[j][0]] = V(accs[j], block.args[j][1])
        t.env[block.args[k + j][0]] = V(xs[j], block.args[k + j][1])
    t.block(block.ops[:-1])
    rets = [t.get(x, term) for x in term.operands()]
    tmps = []
    for j, r in enumerate(rets):
        tn = t.fresh("new")
        t.emit(f"{ctype(ins[j].ty.scalar())} {tn} = {r.name};")
        tmps.append(tn)
    t.env = saved
    return tmps


def _scalars(t: Translator, ins, hint: str, of) -> list[str]:
    """One local per input, initialised to of(j) (an element expression)."""
    names = []
    for j, v in enumerate(ins):
        n = t.fresh(hint)
        t.emit(f"{ctype(v.ty.scalar())} {n} = {of(j)};")
        names.append(n)
    return names


def _scan_loops(t, ins, outs, block, term, P, R, Q, reverse):
    """Scans run in order along the axis, one running value per (row, column)."""
    t.emit(f"for (int _p = 0; _p < {P}; ++_p) for (int _q = 0; _q < {Q}; ++_q) {{")
    t.depth += 1
    first = f"{R - 1}" if reverse else "0"
    accs = _scalars(t, ins, "acc", lambda j: f"{ins[j].name}[(_p * {R} + {first}) * {Q} + _q]")
    for j, o in enumerate(outs):
        t.emit(f"{o.name}[(_p * {R} + {first}) * {Q} + _q] = {accs[j]};")
    t.emit(f"for (int _r = {R - 2}; _r >= 0; --_r) {{" if reverse else f"for (int _r = 1; _r < {R}; ++_r) {{")
    t.depth += 1
    xs = _scalars(t, ins, "x", lambda j: f"{ins[j].name}[(_p * {R} + _r) * {Q} + _q]")
    new = _combine(t, block, term, ins, accs, xs)
    for j, o in enumerate(outs):
        t.emit(f"{accs[j]} = {new[j]};")
        t.emit(f"{o.name}[(_p * {R} + _r) * {Q} + _q] = {accs[j]};")
    t.depth -= 1
    t.emit("}")
    t.depth -= 1
    t.emit("}")


def _reduce_columns(t, ins, outs, block, term, P, R, Q):
    """A reduction over a leading axis: every column is combined in order along the axis, as one
    loop over the (contiguous) columns per step, which vectorizes."""
    accs = []
    for j, v in enumerate(ins):
        a = t.alloc(v.ty.with_shape([Q]), "acc")
        accs.append(a)
    t.emit(f"for (int _p = 0; _p < {P}; ++_p) {{")
    t.depth += 1
    for j, v in enumerate(ins):
        t.emit(f"for (int _q = 0; _q < {Q}; ++_q) {accs[j].name}[_q] = {v.name}[(_p * {R}) * {Q} + _q];")
    t.emit(f"for (int _r = 1; _r < {R}; ++_r) for (int _q = 0; _q < {Q}; ++_q) {{")
    t.depth += 1
    cur = _scalars(t, ins, "acc", lambda j: f"{accs[j].name}[_q]")
    xs = _scalars(t, ins, "x", lambda j: f"{ins[j].name}[(_p * {R} + _r) * {Q} + _q]")
    new = _combine(t, block, term, ins, cur, xs)
    for j in range(len(ins)):
        t.emit(f"{accs[j].name}[_q] = {new[j]};")
    t.depth -= 1
    t.emit("}")
    for j, o in enumerate(outs):
        t.emit(f"for (int _q = 0; _q < {Q}; ++_q) {o.name}[_p * {Q} + _q] = {accs[j].name}[_q];"
               if o.ty.is_tensor else f"{o.name} = {accs[j].name}[0];")
    t.depth -= 1
    t.emit("}")


# Lanes of a reduction along the last axis: that many running values, combined elementwise as
# the row is read (a loop that vectorizes) and then pairwise. Triton's combine functions are
# associative by contract, and a GPU combines in a tree too.
_LANES = 16


def _reduce_rows(t, ins, outs, block, term, P, R):
    L = _LANES if R % _LANES == 0 and R >= 2 * _LANES else 1
    t.emit(f"for (int _p = 0; _p < {P}; ++_p) {{")
    t.depth += 1
    lanes = []
    for j, v in enumerate(ins):
        # Local arrays: GCC vectorizes the lane loop only when it can see they alias nothing.
        lanes.append(V(t.fresh("lanes"), v.ty.with_shape([L])))
        t.emit(f"{ctype(v.ty.scalar())} {lanes[j].name}[{L}];")
        t.emit(f"for (int _l = 0; _l < {L}; ++_l) {lanes[j].name}[_l] = {v.name}[_p * {R} + _l];")

    def step(loop: str, other):
        # Unrolled, the lane loop became 16 scalar chains; kept as a loop, it vectorizes.
        t.emit(loop.replace("for (int _l", "{\n#pragma GCC unroll 1\nfor (int _l", 1) + " {")
        t.depth += 1
        cur = _scalars(t, ins, "acc", lambda j: f"{lanes[j].name}[_l]")
        xs = _scalars(t, ins, "x", other)
        new = _combine(t, block, term, ins, cur, xs)
        for j in range(len(ins)):
            t.emit(f"{lanes[j].name}[_l] = {new[j]};")
        t.depth -= 1
        t.emit("}}")

    step(f"for (int _r = {L}; _r < {R}; _r += {L}) for (int _l = 0; _l < {L}; ++_l)",
         lambda j: f"{ins[j].name}[_p * {R} + _r + _l]")
    w = L // 2
    while w >= 1:
        step(f"for (int _l = 0; _l < {w}; ++_l)", lambda j, w=w: f"{lanes[j].name}[_l + {w}]")
        w //= 2
    for j, o in enumerate(outs):
        t.emit(f"{o.name}[_p] = {lanes[j].name}[0];" if o.ty.is_tensor else f"{o.name} = {lanes[j].name}[0];")
    t.depth -= 1
    t.emit("}")


@handles("tt.reduce")
def _reduce(t: Translator, op: Op):
    _reduce_or_scan(t, op, scan=False)


@handles("tt.scan")
def _scan(t: Translator, op: Op):
    _reduce_or_scan(t, op, scan=True)


@handles("tt.extern_elementwise")
def _extern(t: Translator, op: Op):
    sym = re.search(r'symbol = "([^"]+)"', op.body).group(1)
    ins = [t.get_lazy(x, op) for x in op.operands(op.body.split("{", 1)[0])]
    ty = t.result_type(op)
    base = sym
    for pre in ("__nv_", "__ocml_", "__imf_"):
        if base.startswith(pre):
            base = base[len(pre):]
    base = re.sub(r"_f(32|64)$", "", base)
    if base.startswith("fast_"):
        base = base[5:]
    ft = ftype(ty.elem) if _is_float(ty.elem) else "float"
    name = None
    if base in _EXTERN_MATH:
        name = base
    elif base.endswith("f") and base[:-1] in _EXTERN_MATH:
        name = base[:-1]
    args = [f"(({ft}){v.at('{i}')})" for v in ins]
    if name is not None:
        tmpl = math_call(name, args)
    elif base in ("rsqrtf", "rsqrt"):
        tmpl = f"(({ft})1 / std::sqrt({args[0]}))"
    elif base in ("isnanf", "isnand", "isnan"):
        tmpl = f"(std::isnan({args[0]}) ? 1 : 0)"
    elif base in ("isinff", "isinfd", "isinf"):
        tmpl = f"(std::isinf({args[0]}) ? 1 : 0)"
    elif base in ("powif", "powi"):
        tmpl = f"std::pow({args[0]}, (int)({ins[1].at('{i}')}))"
    elif base in ("signbitf", "signbitd"):
        tmpl = f"(std::signbit({args[0]}) ? 1 : 0)"
    elif base in ("fdividef", "div_rn", "fdiv_rn"):
        tmpl = f"({args[0]} / {args[1]})"
    elif base in ("saturatef",):
        tmpl = f"std::fmin(std::fmax({args[0]}, 0.0f), 1.0f)"
    else:
        t.unsupported(op, f"libdevice function {sym}")
    src_elem = "f64" if ft == "double" else "f32"
    t.define(op.results[0], ty, lambda i: _cast(tmpl.replace("{i}", i), src_elem, ty.elem), lazy=True)


@handles("tt.clampf")
def _clampf(t: Translator, op: Op):
    x, lo, hi = (t.get_lazy(v, op) for v in op.operands(op.body.split("propagateNan")[0]))
    ty = t.result_type(op)
    ft = ftype(ty.elem)
    nan = "propagateNan = all" in op.body
    fmax, fmin = ("em::maximum", "em::minimum") if nan else ("std::fmax", "std::fmin")
    t.define(op.results[0], ty,
             lambda i: _cast(f"{fmin}({fmax}(({ft}){x.at(i)}, ({ft}){lo.at(i)}), ({ft}){hi.at(i)})",
                             "f64" if ft == "double" else "f32", ty.elem), lazy=True)


@handles("tt.precise_sqrt")
def _psqrt(t: Translator, op: Op):
    (x,) = (t.get_lazy(v, op) for v in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: _cast(f"std::sqrt(({ftype(ty.elem)}){x.at(i)})", "f64", ty.elem),
             lazy=True)


@handles("tt.precise_divf")
def _pdiv(t: Translator, op: Op):
    x, y = (t.get_lazy(v, op) for v in op.operands())
    ty = t.result_type(op)
    ft = ftype(ty.elem)
    t.define(op.results[0], ty, lambda i: _cast(f"(({ft}){x.at(i)} / ({ft}){y.at(i)})", "f64", ty.elem), lazy=True)


@handles("tt.mulhiui")
def _mulhi(t: Translator, op: Op):
    x, y = (t.get_lazy(v, op) for v in op.operands())
    ty = t.result_type(op)
    if ty.elem == "i32":
        t.define(op.results[0], ty, lambda i: f"(int32_t)(((uint64_t)(uint32_t){x.at(i)} * (uint32_t){y.at(i)}) >> 32)",
                 lazy=True)
    else:
        t.define(op.results[0], ty,
                 lambda i: f"(int64_t)(((unsigned __int128)(uint64_t){x.at(i)} * (uint64_t){y.at(i)}) >> 64)",
                 lazy=True)


@handles("math.absi")
def _absi(t: Translator, op: Op):
    (x,) = (t.get_lazy(v, op) for v in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"({ctype(ty.scalar())})({x.at(i)} < 0 ? -{x.at(i)} : {x.at(i)})", lazy=True)


@handles("math.ctpop")
def _ctpop(t: Translator, op: Op):
    (x,) = (t.get_lazy(v, op) for v in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"({ctype(ty.scalar())})__builtin_popcountll(({utype(ty.elem)}){x.at(i)})",
             lazy=True)


@handles("arith.negf")
def _negf(t: Translator, op: Op):
    (x,) = (t.get_lazy(v, op) for v in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"(-{x.at(i)})", lazy=True)
