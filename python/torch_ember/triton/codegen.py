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

import functools
import hashlib
import linecache
import math
import re
import struct
from pathlib import Path

from .ttir import Op, Ty, find_top, parse_module, parse_type, split_top

@functools.lru_cache(maxsize=None)
def codegen_version() -> str:
    """A hash of the translator's own sources and the prelude it emits: part of every cache key
    of translated kernels (ours and Triton's), so a changed translator never serves a binary
    built by an older one."""
    here = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in ("codegen.py", "codegen_values.py", "codegen_control.py", "ttir.py", "runtime_h.py"):
        h.update((here / f).read_bytes())
    h.update((here.parent / "include" / "torch_ember" / "vec_math.h").read_bytes())
    return h.hexdigest()[:16]


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

    def raw(self, idx: str = "_i") -> str:
        """One element as stored (16-bit floats as their storage type)."""
        return f"{self.name}[{idx}]" if self.ty.is_tensor else self.name

    def at(self, idx: str = "_i") -> str:
        """Read one element (16-bit floats are read as float)."""
        e = self.raw(idx)
        if self.ty.elem in ("f16", "bf16"):
            return f"((float){e})"
        return e


class Lazy(V):
    """A block value that is not stored: its element expression is inlined into the ops that read
    it, so a chain of elementwise ops (and the splats, ranges and broadcasts feeding pointer
    arithmetic) becomes one loop instead of one array pass each. Only pure ops are lazy: loads,
    atomics and anything with an effect are emitted where they stand. A handler that needs the
    array (`Translator.get`) stores it at that point."""

    __slots__ = ("expr",)

    def __init__(self, ty: Ty, expr):
        self.ty = ty
        self.expr = expr

    @property
    def name(self):
        raise AssertionError("a lazy block value has no array; read it through Translator.get")

    def raw(self, idx: str = "_i") -> str:
        return f"({self.expr(idx)})"


# Lazy values read by more than one op are stored instead when their expression is costly (see
# costly) or longer than this; any longer than the second limit are stored anyway, to keep the
# generated expressions readable for the C++ compiler.
_SHARED_EXPR_CHARS = 400
_MAX_EXPR_CHARS = 3000


def costly(expr: str) -> bool:
    """Whether an element expression costs more to re-evaluate than a load: it calls a math
    function or divides by a run-time value (index arithmetic by constants is shifts and masks)."""
    return any(f in expr for f in ("vmath::", "std::", "em::sdiv", "em::srem", "em::udiv", "em::urem",
                                   "em::maxnum", "em::minnum", "em::maximum", "em::minimum"))


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
        # How many times each SSA value is read (its name's occurrences after the definition).
        self.uses: dict[str, int] = {}
        for tok in re.findall(r"%[\w.$-]+(?:#\d+)?", ttir_text):
            self.uses[tok] = self.uses.get(tok, 0) + 1
        self.uses = {k: n - 1 for k, n in self.uses.items()}
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

    def get_lazy(self, name: str, op: Op) -> V:
        """An operand for an elementwise read (V.raw / V.at), possibly a Lazy expression."""
        v = self.env.get(name)
        if v is None:
            raise UnsupportedTritonOp(f"value {name} used before definition in {self.where(op)}")
        return v

    def get(self, name: str, op: Op) -> V:
        """An operand with a C++ name: a lazy block value is stored here, before the op's code
        (so never inside a loop the handler emits), and replaces the lazy one for the rest of
        this scope."""
        v = self.get_lazy(name, op)
        if isinstance(v, Lazy):
            v = self.store(v, name)
            self.env[name] = v
        return v

    def store(self, v: Lazy, hint: str) -> V:
        out = self.alloc(v.ty, hint)
        self.emit(f"for (int _i = 0; _i < {v.ty.numel}; ++_i) {out.name}[_i] = {v.raw('_i')};")
        return out

    def alloc(self, ty: Ty, hint: str) -> V:
        name = self.fresh(hint)
        size = _SIZE[ty.elem] * ty.numel
        off = (self.scratch + 63) // 64 * 64
        self.scratch = off + size
        self.emit(f"{ctype(ty)}* {name} = ({ctype(ty)}*)(scratch + {off});")
        return V(name, ty)

    def define(self, result: str, ty: Ty, expr_of_index, hint=None, lazy=False) -> V:
        """Define `result` elementwise: expr_of_index(idx) gives the element's C++ expression.
        With `lazy` (pure expressions only) a block value stays an expression (Lazy) unless it is
        read more than once and costly to recompute."""
        if ty.is_tensor and lazy:
            if ty.elem in ("f16", "bf16"):
                # Round to the 16-bit type as a stored block would: math on 16-bit values is
                # done in float, and each op's result is rounded once, lazy or not.
                inner = expr_of_index
                expr_of_index = lambda i: f"em::{ty.elem}((float)({inner(i)}))"  # noqa: E731
            e = expr_of_index("_i")
            shared_ok = len(e) <= _SHARED_EXPR_CHARS and not costly(e)
            if len(e) <= _MAX_EXPR_CHARS and (shared_ok or self.uses.get(result, 0) <= 1):
                v = Lazy(ty, expr_of_index)
                self.env[result] = v
                return v
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
        a, b = (self.get_lazy(x, op) for x in op.operands())
        ty = self.result_type(op)
        elem = ty.elem
        fn = _ARITH_BINARY[short]
        u = utype(elem) if not _is_float(elem) and elem != "ptr" else None
        c = _CTYPE.get(elem)

        def expr(i):
            x, y = a.at(i), b.at(i)
            return fn(x, y, c, u, elem)

        self.define(op.results[0], ty, expr, lazy=True)

    def math_unary(self, op: Op, short: str):
        ins = [self.get_lazy(x, op) for x in op.operands()]
        ty = self.result_type(op)
        ft = ftype(ty.elem)
        fn = _MATH_UNARY[short]

        def expr(i):
            return _cast(fn(*[f"(({ft}){v.at(i)})" for v in ins], ft=ft), ty.elem if not _is_float(ty.elem) else "f64" if ft == "double" else "f32", ty.elem)

        self.define(op.results[0], ty, expr, lazy=True)

    def cast(self, op: Op):
        (operand,) = op.operands()
        src = self.get_lazy(operand, op)
        ty = self.result_type(op)
        kind = op.name.split(".")[1]
        s, d = src.ty.elem, ty.elem
        if kind in ("bitcast",) or op.name == "tt.bitcast":
            if src.ty.elem == "ptr" or ty.elem == "ptr":
                return self.define(op.results[0], ty, lambda i: f"({ctype(ty.scalar())})({src.at(i)})", lazy=True)
            if ty.is_tensor:
                src = self.get(operand, op)
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
        self.define(op.results[0], ty, expr, lazy=True)


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


# The math functions vec_math.h has in a vectorizable float version (and <cmath>'s for double).
VMATH = {"exp", "exp2", "log", "log1p", "tanh", "erf"}


def math_call(name: str, args) -> str:
    """A call of <cmath>'s `name`, or of Ember's vectorizable version where vec_math.h has one."""
    return f"{'ember::vmath' if name in VMATH else 'std'}::{name}({', '.join(args)})"


def _fn(name):
    return lambda *a, ft: math_call(name, a)


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


def translate(ttir_text: str) -> tuple[str, str]:
    """C++ source for the module's kernel, and the kernel's name."""
    from .runtime_h import RUNTIME_H
    tr = Translator(ttir_text)
    body, _ = tr.translate()
    return RUNTIME_H + "\n" + body, tr.func.name


# The handlers register themselves on import (they need the names above).
from . import codegen_control, codegen_values  # noqa: E402,F401
