"""Lowers a kernel's TTIR (after Triton's inliner and canonicalizer) to C++ for the host.

The model: one Triton program is one call of a C++ function; `tl.program_id(axis)` is that
call's index in the grid, and the launch entry point (`ember_launch`) runs every index of the
grid on host threads (`em::parallel` in the runtime prelude). A block value (a `tensor<...>` in
TTIR) is a fixed-size array in a per-thread scratch area at an offset decided here, so nothing is
allocated while a program runs; an elementwise op becomes one loop over the array that the C++
compiler vectorizes; masks become predicated loads and stores; `tt.reduce` and `tt.scan` become
loops that apply the op's combine region; `tt.dot` calls a tile product accumulating in fp32 for
16-bit inputs. Shape-only ops (`tt.expand_dims`, `tt.reshape`) reuse their operand's array.

Anything not handled raises `UnsupportedTritonOp` naming the TTIR op and the kernel line it came
from, rather than producing code that might be wrong.
"""
from __future__ import annotations

import linecache
import math
import re
import struct

from .ttir import Op, Ty, find_top, parse_module, parse_type, split_top

# Bumped whenever the generated code changes meaning, so cached shared objects are rebuilt.
CODEGEN_VERSION = "3"


class UnsupportedTritonOp(NotImplementedError):
    """A TTIR construct the Ember backend cannot lower (yet)."""


_CTYPE = {
    "i1": "bool", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
    "f16": "em::f16", "bf16": "em::bf16", "f32": "float", "f64": "double", "index": "int64_t",
}
_SIZE = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8,
         "index": 8, "ptr": 8}
_FLOATS = ("f16", "bf16", "f32", "f64")


def _is_float(elem: str) -> bool:
    return elem in _FLOATS


def _bits(elem: str) -> int:
    return 1 if elem == "i1" else _SIZE[elem] * 8


def ctype(ty: Ty) -> str:
    if ty.elem == "ptr":
        return ctype(ty.pointee) + "*"
    if ty.elem not in _CTYPE:
        raise UnsupportedTritonOp(f"element type {ty.elem}")
    return _CTYPE[ty.elem]


def utype(elem: str) -> str:
    return {"i1": "bool", "i8": "uint8_t", "i16": "uint16_t", "i32": "uint32_t",
            "i64": "uint64_t", "index": "uint64_t"}[elem]


def ftype(elem: str) -> str:
    """The C++ type float math on `elem` is computed in."""
    return "double" if elem == "f64" else "float"


class V:
    """A lowered SSA value: a C++ name (an array pointer for tensors, a local for scalars)."""

    __slots__ = ("name", "ty")

    def __init__(self, name: str, ty: Ty):
        self.name = name
        self.ty = ty

    def at(self, idx: str = "_i") -> str:
        """Read one element (16-bit floats are read as float)."""
        e = f"{self.name}[{idx}]" if self.ty.is_tensor else self.name
        if self.ty.elem in ("f16", "bf16"):
            return f"((float){e})"
        return e


def _cast(expr: str, src: str, dst: str) -> str:
    """C++ for converting `expr` (already read, 16-bit floats as float) from `src` to `dst`."""
    if dst in ("f16", "bf16"):
        return f"em::{dst}((float)({expr}))"
    if dst == "i1":
        return f"((bool)(({expr}) != 0))"
    return f"(({_CTYPE[dst]})({expr}))"


def _float_literal(x: float, elem: str) -> str:
    if math.isnan(x):
        lit = "std::numeric_limits<double>::quiet_NaN()"
    elif math.isinf(x):
        lit = ("-" if x < 0 else "") + "std::numeric_limits<double>::infinity()"
    else:
        lit = float.hex(x)
    return _cast(lit, "f64", elem)


def _parse_scalar_literal(tok: str, elem: str):
    tok = tok.strip()
    if tok in ("true", "false"):
        return 1 if tok == "true" else 0
    if _is_float(elem):
        if tok.lower().startswith("0x"):
            bits = int(tok, 16)
            if elem == "f32":
                return struct.unpack("<f", bits.to_bytes(4, "little"))[0]
            if elem == "f64":
                return struct.unpack("<d", bits.to_bytes(8, "little"))[0]
            if elem == "f16":
                return struct.unpack("<e", bits.to_bytes(2, "little"))[0]
            if elem == "bf16":
                return struct.unpack("<f", (bits << 16).to_bytes(4, "little"))[0]
        return float(tok)
    return int(tok, 0)


def _literal(value, elem: str) -> str:
    if _is_float(elem):
        return _float_literal(float(value), elem)
    if elem == "i1":
        return "true" if value else "false"
    if elem in ("i64", "index"):
        return f"((int64_t){int(value)}LL)"
    return f"(({_CTYPE[elem]}){int(value)}LL)"


def _flat(idx: list[str], shape) -> str:
    if not shape:
        return "0"
    e = idx[0]
    for k in range(1, len(shape)):
        e = f"({e}) * {shape[k]} + {idx[k]}"
    return e


_EXTERN_MATH = {
    "tanh", "tan", "sin", "cos", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "pow",
    "sqrt", "cbrt", "erf", "erfc", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh",
    "acosh", "atanh", "floor", "ceil", "trunc", "round", "rint", "nearbyint", "fmod", "hypot",
    "lgamma", "tgamma", "fmax", "fmin", "fabs", "copysign", "remainder", "fma", "fdim",
}


class Translator:
    def __init__(self, ttir_text: str):
        funcs, self.locs = parse_module(ttir_text)
        public = [f for f in funcs]
        if len(public) != 1:
            raise UnsupportedTritonOp(
                f"{len(funcs)} functions in the module (calls to noinline functions, `tt.call`)")
        self.func = public[0]
        self.lines: list[str] = []
        self.depth = 1
        self.scratch = 0
        self.counter = 0
        self.env: dict[str, V] = {}
        self.yield_stack: list = []
        # The function's labelled blocks, for branches; the blocks on the current branch path
        # (a branch back to one of them would be a loop), and how many blocks were emitted.
        self.blocks = {b.label: b for b in self.func.blocks if b.label}
        self.branch_path: list[str] = []
        self.inlined = 0

    # -- helpers ------------------------------------------------------------------------------

    def where(self, op: Op) -> str:
        r = self.locs.resolve(op.loc)
        if not r:
            return f"kernel {self.func.name}"
        file, line = r
        src = linecache.getline(file, line).strip()
        return f"kernel {self.func.name}, {file}:{line}" + (f": {src}" if src else "")

    def unsupported(self, op: Op, what: str = ""):
        detail = f" ({what})" if what else ""
        raise UnsupportedTritonOp(
            f"the Ember Triton backend cannot lower TTIR op `{op.name}`{detail} in {self.where(op)}")

    def emit(self, line: str):
        self.lines.append("  " * self.depth + line)

    def fresh(self, hint: str = "t") -> str:
        self.counter += 1
        hint = re.sub(r"[^A-Za-z0-9_]", "_", hint.lstrip("%"))[:24]
        return f"v{self.counter}_{hint}"

    def get(self, name: str, op: Op) -> V:
        v = self.env.get(name)
        if v is None:
            raise UnsupportedTritonOp(f"value {name} used before definition in {self.where(op)}")
        return v

    def alloc(self, ty: Ty, hint: str) -> V:
        name = self.fresh(hint)
        size = _SIZE[ty.elem] * ty.numel
        off = (self.scratch + 63) // 64 * 64
        self.scratch = off + size
        self.emit(f"{ctype(ty)}* {name} = ({ctype(ty)}*)(scratch + {off});")
        return V(name, ty)

    def define(self, result: str, ty: Ty, expr_of_index, hint=None) -> V:
        """Define `result` elementwise: expr_of_index(idx) gives the element's C++ expression."""
        if ty.is_tensor:
            v = self.alloc(ty, hint or result)
            self.emit(f"for (int _i = 0; _i < {ty.numel}; ++_i) {v.name}[_i] = {expr_of_index('_i')};")
        else:
            v = V(self.fresh(hint or result), ty)
            self.emit(f"{ctype(ty)} {v.name} = {expr_of_index('0')};")
        self.env[result] = v
        return v

    def nested(self, shape, body: str):
        """Emit loops _j0.._jn over `shape` around `body` (which uses _j0.._jn)."""
        self.emit("{")
        for d, n in enumerate(shape):
            self.emit(f"  for (int _j{d} = 0; _j{d} < {n}; ++_j{d})")
        self.emit("    " + body)
        self.emit("}")

    def result_type(self, op: Op) -> Ty:
        t = op.types_text()
        k = find_top(t, "->")
        if k >= 0:
            t = t[k + 2:].strip()
        else:
            k = find_top(t, " to ")
            if k >= 0:
                t = t[k + 4:].strip()
            else:
                t = split_top(t)[-1]
        if t.startswith("(") and t.endswith(")"):
            t = t[1:-1]
        return parse_type(split_top(t)[-1])

    def result_types(self, op: Op) -> list[Ty]:
        t = op.types_text()
        k = find_top(t, "->")
        if k >= 0:
            t = t[k + 2:].strip()
        if t.startswith("(") and t.endswith(")"):
            t = t[1:-1]
        return [parse_type(x) for x in split_top(t)]

    # -- driver ------------------------------------------------------------------------------

    def translate(self) -> tuple[str, list[Ty]]:
        params = []
        arg_types = []
        for nm, ty in self.func.args:
            cname = self.fresh(nm)
            self.env[nm] = V(cname, ty)
            params.append(f"{ctype(ty)} {cname}")
            arg_types.append(ty)
        for axis, c in enumerate("xyz"):
            self.env[f"@pid_{c}"] = V(f"pid{axis}", Ty("i32"))
        self.block(self.func.body.ops)
        body = "\n".join(self.lines)
        sig = ", ".join(params + ["int32_t pid0", "int32_t pid1", "int32_t pid2", "int32_t np0",
                                  "int32_t np1", "int32_t np2", "char* __restrict scratch"])
        unpack = []
        call = []
        for i, (p, ty) in enumerate(zip(params, arg_types)):
            unpack.append(f"  {ctype(ty)} a{i} = *({ctype(ty)}*)args[{i}];")
            call.append(f"a{i}")
        call_args = ", ".join(call + ["(int32_t)x", "(int32_t)y", "(int32_t)z", "(int32_t)gx",
                                      "(int32_t)gy", "(int32_t)gz", "scratch"])
        src = (
            f"static void ember_program({sig}) {{\n{body}\n}}\n\n"
            f'extern "C" long ember_scratch_bytes() {{ return {self.scratch}; }}\n\n'
            f'extern "C" void ember_launch(void** args, int64_t gx, int64_t gy, int64_t gz, int nthreads) {{\n'
            + "\n".join(unpack) + "\n"
            f"  em::parallel(gx * gy * gz, nthreads, {max(self.scratch, 64)}, [&](int64_t pid, char* scratch) {{\n"
            f"    int64_t x = pid % gx, y = (pid / gx) % gy, z = pid / (gx * gy);\n"
            f"    ember_program({call_args});\n"
            f"  }});\n}}\n"
        )
        return src, arg_types

    def block(self, ops):
        for op in ops:
            self.op(op)

    # -- ops ---------------------------------------------------------------------------------

    def op(self, op: Op):
        name = op.name
        handler = _HANDLERS.get(name)
        if handler is not None:
            return handler(self, op)
        dialect, _, short = name.partition(".")
        if dialect == "arith" and short in _ARITH_BINARY:
            return self.arith_binary(op, short)
        if dialect == "math" and short in _MATH_UNARY:
            return self.math_unary(op, short)
        if name in _CASTS:
            return self.cast(op)
        self.unsupported(op)

    def arith_binary(self, op: Op, short: str):
        a, b = (self.get(x, op) for x in op.operands())
        ty = self.result_type(op)
        elem = ty.elem
        fn = _ARITH_BINARY[short]
        u = utype(elem) if not _is_float(elem) and elem != "ptr" else None
        c = _CTYPE.get(elem)

        def expr(i):
            x, y = a.at(i), b.at(i)
            return fn(x, y, c, u, elem)

        self.define(op.results[0], ty, expr)

    def math_unary(self, op: Op, short: str):
        ins = [self.get(x, op) for x in op.operands()]
        ty = self.result_type(op)
        ft = ftype(ty.elem)
        fn = _MATH_UNARY[short]

        def expr(i):
            return _cast(fn(*[f"(({ft}){v.at(i)})" for v in ins], ft=ft), ty.elem if not _is_float(ty.elem) else "f64" if ft == "double" else "f32", ty.elem)

        self.define(op.results[0], ty, expr)

    def cast(self, op: Op):
        (src,) = (self.get(x, op) for x in op.operands())
        ty = self.result_type(op)
        kind = op.name.split(".")[1]
        s, d = src.ty.elem, ty.elem
        if kind in ("bitcast",) or op.name == "tt.bitcast":
            if src.ty.elem == "ptr" or ty.elem == "ptr":
                return self.define(op.results[0], ty, lambda i: f"({ctype(ty.scalar())})({src.at(i)})")
            if ty.is_tensor:
                v = self.alloc(ty, op.results[0])
                self.emit(f"std::memcpy({v.name}, {src.name}, {ty.numel * _SIZE[d]});")
                self.env[op.results[0]] = v
            else:
                v = V(self.fresh(op.results[0]), ty)
                self.emit(f"{ctype(ty)} {v.name}; std::memcpy(&{v.name}, &{src.name}, {_SIZE[d]});")
                self.env[op.results[0]] = v
            return
        if kind in ("extui", "uitofp"):
            def expr(i):
                return _cast(f"(({utype(s)}){src.at(i)})", s, d)
        elif kind == "fptoui":
            def expr(i):
                return f"(({_CTYPE[d]})(uint64_t)({src.at(i)}))"
        elif kind == "trunci" and d == "i1":
            def expr(i):
                return f"((bool)(({src.at(i)}) & 1))"
        elif kind == "ptr_to_int":
            def expr(i):
                return f"(({_CTYPE[d]})(intptr_t)({src.at(i)}))"
        elif kind == "int_to_ptr":
            def expr(i):
                return f"(({ctype(ty.scalar())})(intptr_t)({src.at(i)}))"
        else:
            def expr(i):
                return _cast(src.at(i), s, d)
        self.define(op.results[0], ty, expr)


# ----- elementwise tables ---------------------------------------------------------------------


def _bin(o):
    return lambda x, y, c, u, e: f"({x} {o} {y})"


_ARITH_BINARY = {
    "addi": _bin("+"), "addf": _bin("+"), "subi": _bin("-"), "subf": _bin("-"),
    "muli": _bin("*"), "mulf": _bin("*"), "divf": _bin("/"),
    "andi": _bin("&"), "ori": _bin("|"), "xori": _bin("^"),
    "remf": lambda x, y, c, u, e: f"std::fmod(({ftype(e)}){x}, ({ftype(e)}){y})",
    "divsi": lambda x, y, c, u, e: f"em::sdiv<{c}>({x}, {y})",
    "remsi": lambda x, y, c, u, e: f"em::srem<{c}>({x}, {y})",
    "divui": lambda x, y, c, u, e: f"(({c})em::sdiv<{u}>(({u}){x}, ({u}){y}))",
    "remui": lambda x, y, c, u, e: f"(({c})em::srem<{u}>(({u}){x}, ({u}){y}))",
    "shli": lambda x, y, c, u, e: f"em::shl<{c}>({x}, (int64_t)({y}))",
    "shrsi": lambda x, y, c, u, e: f"em::ashr<{c}>({x}, (int64_t)({y}))",
    "shrui": lambda x, y, c, u, e: f"em::lshr<{c}>({x}, (int64_t)({y}))",
    "maxsi": lambda x, y, c, u, e: f"std::max<{c}>({x}, {y})",
    "minsi": lambda x, y, c, u, e: f"std::min<{c}>({x}, {y})",
    "maxui": lambda x, y, c, u, e: f"(({c})std::max<{u}>(({u}){x}, ({u}){y}))",
    "minui": lambda x, y, c, u, e: f"(({c})std::min<{u}>(({u}){x}, ({u}){y}))",
    "maxnumf": lambda x, y, c, u, e: f"em::maxnum(({ftype(e)}){x}, ({ftype(e)}){y})",
    "minnumf": lambda x, y, c, u, e: f"em::minnum(({ftype(e)}){x}, ({ftype(e)}){y})",
    "maximumf": lambda x, y, c, u, e: f"em::maximum(({ftype(e)}){x}, ({ftype(e)}){y})",
    "minimumf": lambda x, y, c, u, e: f"em::minimum(({ftype(e)}){x}, ({ftype(e)}){y})",
    "copysign": lambda x, y, c, u, e: f"std::copysign(({ftype(e)}){x}, ({ftype(e)}){y})",
}


def _fn(name):
    return lambda *a, ft: f"std::{name}({', '.join(a)})"


_MATH_UNARY = {
    "exp": _fn("exp"), "exp2": _fn("exp2"), "log": _fn("log"), "log2": _fn("log2"),
    "log1p": _fn("log1p"), "expm1": _fn("expm1"), "sqrt": _fn("sqrt"),
    "rsqrt": lambda x, ft: f"(({ft})1 / std::sqrt({x}))",
    "absf": _fn("fabs"), "ceil": _fn("ceil"), "floor": _fn("floor"), "sin": _fn("sin"),
    "cos": _fn("cos"), "tan": _fn("tan"), "tanh": _fn("tanh"), "erf": _fn("erf"),
    "trunc": _fn("trunc"), "round": _fn("round"), "roundeven": _fn("nearbyint"),
    "cbrt": _fn("cbrt"), "atan": _fn("atan"), "asin": _fn("asin"), "acos": _fn("acos"),
    "sinh": _fn("sinh"), "cosh": _fn("cosh"), "fma": _fn("fma"), "powf": _fn("pow"),
    "atan2": _fn("atan2"),
}

_CASTS = {f"arith.{k}" for k in ("extf", "truncf", "sitofp", "uitofp", "fptosi", "fptoui", "extsi",
                                  "extui", "trunci", "index_cast", "index_castui", "bitcast")}
_CASTS |= {"tt.bitcast", "tt.ptr_to_int", "tt.int_to_ptr"}

_CMPI = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=",
         "ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}
_CMPF = {
    "oeq": "({x} == {y})", "ogt": "({x} > {y})", "oge": "({x} >= {y})", "olt": "({x} < {y})",
    "ole": "({x} <= {y})", "one": "({x} < {y} || {x} > {y})", "ord": "({x} == {x} && {y} == {y})",
    "ueq": "!({x} < {y} || {x} > {y})", "ugt": "!({x} <= {y})", "uge": "!({x} < {y})",
    "ult": "!({x} >= {y})", "ule": "!({x} > {y})", "une": "({x} != {y})",
    "uno": "({x} != {x} || {y} != {y})", "true": "true", "false": "false",
}


# ----- op handlers ------------------------------------------------------------------------------

_HANDLERS = {}


def handles(*names):
    def deco(fn):
        for n in names:
            _HANDLERS[n] = fn
        return fn
    return deco


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
        t.define(op.results[0], ty, lambda i: lit)
        return
    lit = _literal(_parse_scalar_literal(val, ty.elem), ty.elem)
    v = V(t.fresh(op.results[0]), ty)
    t.emit(f"const {ctype(ty)} {v.name} = {lit};")
    t.env[op.results[0]] = v


@handles("ub.poison")
def _poison(t: Translator, op: Op):
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"{ctype(ty.scalar())}{{}}")


@handles("arith.cmpi", "arith.cmpf")
def _cmp(t: Translator, op: Op):
    pred = op.body.split(",", 1)[0].strip()
    a, b = (t.get(x, op) for x in op.operands())
    ty = a.ty.with_elem("i1")
    if op.name == "arith.cmpi":
        if pred not in _CMPI:
            t.unsupported(op, pred)
        o = _CMPI[pred]
        if pred.startswith("u"):
            u = utype(a.ty.elem) if a.ty.elem != "ptr" else "uintptr_t"
            t.define(op.results[0], ty, lambda i: f"(({u}){a.at(i)} {o} ({u}){b.at(i)})")
        else:
            t.define(op.results[0], ty, lambda i: f"({a.at(i)} {o} {b.at(i)})")
    else:
        if pred not in _CMPF:
            t.unsupported(op, pred)
        f = _CMPF[pred]
        t.define(op.results[0], ty, lambda i: f.format(x=a.at(i), y=b.at(i)))


@handles("arith.select")
def _select(t: Translator, op: Op):
    c, a, b = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    if ty.elem in ("f16", "bf16"):
        t.define(op.results[0], ty, lambda i: f"({c.at(i)} ? {a.name}{'[' + i + ']' if a.ty.is_tensor else ''} : {b.name}{'[' + i + ']' if b.ty.is_tensor else ''})")
    else:
        t.define(op.results[0], ty, lambda i: f"({c.at(i)} ? {a.at(i)} : {b.at(i)})")


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
    t.define(op.results[0], ty, lambda i: f"({ctype(ty.scalar())})({start} + {i})")


@handles("tt.splat")
def _splat(t: Translator, op: Op):
    (src,) = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: src.name)


@handles("tt.expand_dims", "tt.reshape")
def _reshape(t: Translator, op: Op):
    (src,) = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    if op.name == "tt.reshape" and "efficient_layout" not in op.body and "allow_reorder" in op.body:
        pass  # any element order is allowed; keep row-major
    t.env[op.results[0]] = V(src.name, ty)


@handles("tt.broadcast")
def _broadcast(t: Translator, op: Op):
    (src,) = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    if src.ty.shape == ty.shape:
        t.env[op.results[0]] = V(src.name, ty)
        return
    v = t.alloc(ty, op.results[0])
    d = [f"_j{k}" for k in range(len(ty.shape))]
    s = [("0" if src.ty.shape[k] == 1 else d[k]) for k in range(len(ty.shape))]
    t.nested(ty.shape, f"{v.name}[{_flat(d, ty.shape)}] = {src.name}[{_flat(s, src.ty.shape)}];")
    t.env[op.results[0]] = v


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
    p, off = (t.get(x, op) for x in op.operands())
    ty = p.ty if p.ty.is_tensor or not off.ty.is_tensor else p.ty.with_shape(off.ty.shape)
    t.define(op.results[0], ty, lambda i: f"({p.at(i)} + {off.at(i)})")


@handles("tt.load")
def _load(t: Translator, op: Op):
    if "boundaryCheck" in op.body or "padding" in op.body:
        t.unsupported(op, "block pointers (tl.make_block_ptr)")
    ins = [t.get(x, op) for x in op.operands()]
    ptr = ins[0]
    if ptr.ty.pointee is None:
        t.unsupported(op, "load through a tensor descriptor or block pointer")
    ty = Ty(ptr.ty.pointee.elem, ptr.ty.shape, ptr.ty.pointee.pointee)
    c = ctype(ty.scalar())

    def raw(v, i):
        return f"{v.name}[{i}]" if v.ty.is_tensor else v.name

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
    ins = [t.get(x, op) for x in op.operands()]
    ptr, val = ins[0], ins[1]
    if ptr.ty.pointee is None:
        t.unsupported(op, "store through a tensor descriptor or block pointer")
    c = ctype(ptr.ty.pointee)

    def raw(v, i):
        return f"{v.name}[{i}]" if v.ty.is_tensor else v.name

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
    a, b, c = (t.get(x, op) for x in op.operands())
    ty = t.result_type(op)
    if len(a.ty.shape) != 2 or len(b.ty.shape) != 2:
        t.unsupported(op, "batched (3-D) dot")
    if any(e.startswith("f8") for e in (a.ty.elem, b.ty.elem)):
        t.unsupported(op, "fp8 operands")
    M, K = a.ty.shape
    N = b.ty.shape[1]
    v = t.alloc(ty, op.results[0])
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
    k = len(ins)
    outs = []
    for r, oty in zip(op.results, out_tys):
        if oty.is_tensor:
            outs.append(t.alloc(oty, r))
        else:
            v = V(t.fresh(r), oty)
            t.emit(f"{ctype(oty)} {v.name}{{}};")
            outs.append(v)
        t.env[r] = outs[-1]
    t.emit(f"for (int _p = 0; _p < {P}; ++_p) for (int _q = 0; _q < {Q}; ++_q) {{")
    t.depth += 1
    accs = []
    first = f"{R - 1}" if reverse else "0"
    for j, v in enumerate(ins):
        an = t.fresh("acc")
        t.emit(f"{ctype(v.ty.scalar())} {an} = {v.name}[(_p * {R} + {first}) * {Q} + _q];")
        accs.append(an)

    def write(pos):
        for j, o in enumerate(outs):
            if scan:
                t.emit(f"{o.name}[(_p * {R} + {pos}) * {Q} + _q] = {accs[j]};")

    write(first)
    if reverse:
        t.emit(f"for (int _r = {R - 2}; _r >= 0; --_r) {{")
    else:
        t.emit(f"for (int _r = 1; _r < {R}; ++_r) {{")
    t.depth += 1
    saved = dict(t.env)
    for j in range(k):
        t.env[block.args[j][0]] = V(accs[j], block.args[j][1])
        xn = t.fresh("x")
        t.emit(f"{ctype(ins[j].ty.scalar())} {xn} = {ins[j].name}[(_p * {R} + _r) * {Q} + _q];")
        t.env[block.args[k + j][0]] = V(xn, block.args[k + j][1])
    term = block.ops[-1]
    t.block(block.ops[:-1])
    if term.name not in ("tt.reduce.return", "tt.scan.return"):
        t.unsupported(term, "combine region terminator")
    rets = [t.get(x, term) for x in term.operands()]
    tmps = []
    for j, r in enumerate(rets):
        tn = t.fresh("new")
        t.emit(f"{ctype(ins[j].ty.scalar())} {tn} = {r.name};")
        tmps.append(tn)
    for j in range(k):
        t.emit(f"{accs[j]} = {tmps[j]};")
    t.env = saved
    write("_r")
    t.depth -= 1
    t.emit("}")
    if not scan:
        for j, o in enumerate(outs):
            if o.ty.is_tensor:
                t.emit(f"{o.name}[_p * {Q} + _q] = {accs[j]};")
            else:
                t.emit(f"{o.name} = {accs[j]};")
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
    ins = [t.get(x, op) for x in op.operands(op.body.split("{", 1)[0])]
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
        tmpl = f"std::{name}({', '.join(args)})"
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
    t.define(op.results[0], ty, lambda i: _cast(tmpl.replace("{i}", i), src_elem, ty.elem))


@handles("tt.clampf")
def _clampf(t: Translator, op: Op):
    x, lo, hi = (t.get(v, op) for v in op.operands(op.body.split("propagateNan")[0]))
    ty = t.result_type(op)
    ft = ftype(ty.elem)
    nan = "propagateNan = all" in op.body
    fmax, fmin = ("em::maximum", "em::minimum") if nan else ("std::fmax", "std::fmin")
    t.define(op.results[0], ty,
             lambda i: _cast(f"{fmin}({fmax}(({ft}){x.at(i)}, ({ft}){lo.at(i)}), ({ft}){hi.at(i)})",
                             "f64" if ft == "double" else "f32", ty.elem))


@handles("tt.precise_sqrt")
def _psqrt(t: Translator, op: Op):
    (x,) = (t.get(v, op) for v in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: _cast(f"std::sqrt(({ftype(ty.elem)}){x.at(i)})", "f64", ty.elem))


@handles("tt.precise_divf")
def _pdiv(t: Translator, op: Op):
    x, y = (t.get(v, op) for v in op.operands())
    ty = t.result_type(op)
    ft = ftype(ty.elem)
    t.define(op.results[0], ty, lambda i: _cast(f"(({ft}){x.at(i)} / ({ft}){y.at(i)})", "f64", ty.elem))


@handles("tt.mulhiui")
def _mulhi(t: Translator, op: Op):
    x, y = (t.get(v, op) for v in op.operands())
    ty = t.result_type(op)
    if ty.elem == "i32":
        t.define(op.results[0], ty, lambda i: f"(int32_t)(((uint64_t)(uint32_t){x.at(i)} * (uint32_t){y.at(i)}) >> 32)")
    else:
        t.define(op.results[0], ty, lambda i: f"(int64_t)(((unsigned __int128)(uint64_t){x.at(i)} * (uint64_t){y.at(i)}) >> 64)")


@handles("math.absi")
def _absi(t: Translator, op: Op):
    (x,) = (t.get(v, op) for v in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"({ctype(ty.scalar())})({x.at(i)} < 0 ? -{x.at(i)} : {x.at(i)})")


@handles("math.ctpop")
def _ctpop(t: Translator, op: Op):
    (x,) = (t.get(v, op) for v in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"({ctype(ty.scalar())})__builtin_popcountll(({utype(ty.elem)}){x.at(i)})")


@handles("arith.negf")
def _negf(t: Translator, op: Op):
    (x,) = (t.get(v, op) for v in op.operands())
    ty = t.result_type(op)
    t.define(op.results[0], ty, lambda i: f"(-{x.at(i)})")


@handles("scf.for")
def _for(t: Translator, op: Op):
    m = re.match(r"^(%\S+) = (%\S+) to (%\S+) step (%\S+)(?:\s+iter_args\((.*)\)\s*->\s*\((.*)\))?\s*(?::\s*(\S+))?$",
                 op.body)
    if not m:
        t.unsupported(op, f"cannot read loop header {op.body!r}")
    iv, lb, ub, step = m.group(1), m.group(2), m.group(3), m.group(4)
    ivty = Ty(m.group(7) or "index")
    lbv, ubv, stv = (t.get(x, op) for x in (lb, ub, step))
    bufs = []
    if m.group(5):
        for part, oty in zip(split_top(m.group(5)), split_top(m.group(6))):
            arg, init = (s.strip() for s in part.split("="))
            ty = parse_type(oty)
            iv0 = t.get(init, op)
            if ty.is_tensor:
                b = t.alloc(ty, arg)
                t.emit(f"std::memmove({b.name}, {iv0.name}, {ty.numel * _SIZE[ty.elem]});")
            else:
                b = V(t.fresh(arg), ty)
                t.emit(f"{ctype(ty)} {b.name} = {iv0.name};")
            bufs.append((arg, b))
    ivn = t.fresh(iv)
    c = ctype(ivty)
    t.emit(f"for ({c} {ivn} = {lbv.name}; {ivn} < ({c}){ubv.name}; {ivn} += ({c}){stv.name}) {{")
    t.depth += 1
    saved = dict(t.env)
    t.env[iv] = V(ivn, ivty)
    for arg, b in bufs:
        t.env[arg] = b
    t.yield_stack.append(("for", [b for _, b in bufs]))
    blocks = op.regions[0]
    t.block(blocks[0].ops)
    t.yield_stack.pop()
    t.env = saved
    t.depth -= 1
    t.emit("}")
    for r, (_, b) in zip(op.results, bufs):
        t.env[r] = b


@handles("scf.if")
def _if(t: Translator, op: Op):
    cond_txt = op.body.split("->")[0]
    (cond,) = (t.get(x, op) for x in op.operands(cond_txt))
    outs = []
    if "->" in op.body:
        tys = op.body.split("->", 1)[1].strip()
        if tys.startswith("(") and tys.endswith(")"):
            tys = tys[1:-1]
        for r, tyt in zip(op.results, split_top(tys)):
            ty = parse_type(tyt)
            if ty.is_tensor:
                b = t.alloc(ty, r)
            else:
                b = V(t.fresh(r), ty)
                t.emit(f"{ctype(ty)} {b.name}{{}};")
            outs.append(b)
    for k, blocks in enumerate(op.regions):
        t.emit(f"if ({cond.name}) {{" if k == 0 else "else {")
        t.depth += 1
        saved = dict(t.env)
        t.yield_stack.append(("if", outs))
        t.block(blocks[0].ops)
        t.yield_stack.pop()
        t.env = saved
        t.depth -= 1
        t.emit("}")
    for r, b in zip(op.results, outs):
        t.env[r] = b


@handles("scf.yield")
def _yield(t: Translator, op: Op):
    vals = [t.get(x, op) for x in op.operands()]
    kind, targets = t.yield_stack[-1]
    names = {b.name for b in targets}
    # Yielded values can alias other iteration buffers (a loop that swaps two carried blocks):
    # copy those through temporaries first.
    staged = []
    for v, b in zip(vals, targets):
        if v.ty.is_tensor and v.name in names and v.name != b.name:
            tmp = t.alloc(v.ty, "stage")
            t.emit(f"std::memcpy({tmp.name}, {v.name}, {v.ty.numel * _SIZE[v.ty.elem]});")
            staged.append(tmp)
        elif not v.ty.is_tensor:
            tn = t.fresh("stage")
            t.emit(f"{ctype(v.ty)} {tn} = {v.name};")
            staged.append(V(tn, v.ty))
        else:
            staged.append(v)
    for v, b in zip(staged, targets):
        if b.ty.is_tensor:
            if v.name != b.name:
                t.emit(f"std::memmove({b.name}, {v.name}, {b.ty.numel * _SIZE[b.ty.elem]});")
        else:
            t.emit(f"{b.name} = {v.name};")


@handles("tt.return")
def _return(t: Translator, op: Op):
    t.emit("return;")


# Branches between the blocks of a function body: Triton emits them for an early `return` inside
# an `if` (the rest of the kernel becomes the other branch). Every path through such a body ends
# in `tt.return`, so each branch is emitted as a C++ block holding its target's code (nested
# inside the branching block, so the values defined before the branch stay in scope); a block
# reached along several paths is emitted once per path. A branch back to a block on the current
# path (a loop built from branches, which Triton does not produce) is refused.
_MAX_INLINED_BLOCKS = 64


def _branch_target(t: Translator, op: Op, text: str):
    text = text.strip()
    m = re.match(r"^(\^[\w]+)(?:\((.*)\))?$", text)
    if not m:
        t.unsupported(op, f"cannot read branch target {text!r}")
    label, args = m.group(1), m.group(2) or ""
    k = find_top(args, " : ")
    names = op.operands(args[:k] if k >= 0 else args)
    return label, [t.get(x, op) for x in names]


def _jump(t: Translator, op: Op, label: str, vals: list):
    block = t.blocks.get(label)
    if block is None:
        t.unsupported(op, f"branch to unknown block {label}")
    if label in t.branch_path:
        t.unsupported(op, f"a loop made of branches (back to {label})")
    t.inlined += 1
    if t.inlined > _MAX_INLINED_BLOCKS:
        t.unsupported(op, f"more than {_MAX_INLINED_BLOCKS} blocks after expanding branches")
    if len(vals) != len(block.args):
        t.unsupported(op, f"{len(vals)} values passed to {label}, which takes {len(block.args)}")
    t.emit("{")
    t.depth += 1
    saved = dict(t.env)
    for (name, ty), v in zip(block.args, vals):
        if ty.is_tensor:
            b = t.alloc(ty, name)
            t.emit(f"std::memmove({b.name}, {v.name}, {ty.numel * _SIZE[ty.elem]});")
        else:
            b = V(t.fresh(name), ty)
            t.emit(f"{ctype(ty)} {b.name} = {v.name};")
        t.env[name] = b
    t.branch_path.append(label)
    t.block(block.ops)
    t.branch_path.pop()
    t.env = saved
    t.depth -= 1
    t.emit("}")


@handles("cf.br")
def _br(t: Translator, op: Op):
    label, vals = _branch_target(t, op, op.body)
    _jump(t, op, label, vals)


@handles("cf.cond_br")
def _cond_br(t: Translator, op: Op):
    parts = split_top(op.body)
    if len(parts) != 3:
        t.unsupported(op, f"cannot read branch {op.body!r}")
    cond = t.get(parts[0].strip(), op)
    if cond.ty.is_tensor:
        t.unsupported(op, "a branch on a block value")
    targets = [_branch_target(t, op, p) for p in parts[1:]]
    t.emit(f"if ({cond.name})")
    _jump(t, op, *targets[0])
    t.emit("else")
    _jump(t, op, *targets[1])


@handles("ttg.barrier", "gpu.barrier")
def _barrier(t: Translator, op: Op):
    pass  # tl.debug_barrier: a program is one host thread, so there is nothing to wait for


@handles("tt.assert")
def _assert(t: Translator, op: Op):
    t.unsupported(op, "device-side assert (tl.device_assert)")


@handles("tt.print")
def _print(t: Translator, op: Op):
    t.unsupported(op, "device-side print (tl.device_print)")


def translate(ttir_text: str) -> tuple[str, str]:
    """C++ source for the module's kernel, and the kernel's name."""
    from .runtime_h import RUNTIME_H
    tr = Translator(ttir_text)
    body, _ = tr.translate()
    return RUNTIME_H + "\n" + body, tr.func.name
