"""Builder: a thin layer over torch_ember._C._Graph used by the lowerings. Ember values are
wrapped in `Val` so that they cannot be mistaken for Python scalars (both would be ints)."""
import math

import torch

from .. import _C
from .errors import Unsupported

FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# The dtypes the compiler generates code for.
SUPPORTED_DTYPES = FLOATING + (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                               torch.float8_e4m3fn, torch.float8_e5m2)  # float8: converted at loads and stores


# IR ops that call library kernels (GEMM, attention), and the dtypes those kernels take.
LIBRARY_OPS = frozenset({"mm", "bmm", "addmm", "scaled_dot_product_attention"})
LIBRARY_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


class Val:
    __slots__ = ("id",)

    def __init__(self, id_: int):
        self.id = id_

    def __repr__(self):
        return f"%{self.id}"


class RecordingGraph:
    """A _C._Graph that also keeps the calls that built it (`tape`), so that the same IR graph can
    be rebuilt in another process without the FX graph: replaying the tape gives a graph with the
    same serialization, hence the same compile-cache key (see warm.py)."""

    _RECORDED = ("input", "scalar", "scalar_int", "constant", "add", "opaque", "mark_output",
                 "mark_output_alias")
    __slots__ = ("graph", "tape")

    def __init__(self):
        self.graph = _C._Graph()
        self.tape = []

    def __getattr__(self, name):
        fn = getattr(self.graph, name)
        if name not in RecordingGraph._RECORDED:
            return fn

        def record(*args):
            if name == "constant":  # keep a host copy: the caller may reuse or free the tensor
                args = (args[0].detach().to("cpu", copy=True),)
            self.tape.append((name, args))
            return fn(*args)
        return record

    def __str__(self):
        return str(self.graph)


def replay(tape) -> "_C._Graph":
    g = _C._Graph()
    for name, args in tape:
        getattr(g, name)(*args)
    return g


_NARROW_INTS = (torch.uint8, torch.int8, torch.int16, torch.int32)


def check_fits(value, dtype):
    """Raises Unsupported when a Python number does not fit `dtype` by c10's checked conversion,
    which the CPU applies to fills and bounds (a negative int still wraps into an unsigned
    type); the node then runs as a library step, whose eager kernel raises the CPU's error."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or dtype == torch.bool or dtype.is_complex:
        return
    if dtype.is_floating_point:
        ok = math.isinf(value) or math.isnan(value) or abs(value) <= torch.finfo(dtype).max
    else:
        info = torch.iinfo(dtype)
        lo = -info.max - 1 if info.min == 0 else info.min
        ok = not (isinstance(value, float) and not math.isfinite(value)) and lo <= value <= info.max
    if not ok:
        raise Unsupported(f"value {value} does not fit {dtype}")


class Builder:
    def __init__(self):
        self.g = RecordingGraph()
        self.source = ""  # the node being lowered; stamped on every IR node it creates

    # --- leaves -----------------------------------------------------------------------------
    def input(self, dtype, sizes, strides, source="") -> Val:
        return Val(self.g.input(dtype, list(sizes), list(strides), source))

    def constant(self, t: torch.Tensor) -> Val:
        if t.dtype not in SUPPORTED_DTYPES:
            raise Unsupported(f"constant of dtype {t.dtype}")
        if t._is_zerotensor():  # torch's efficient zeros own no memory: materialize them
            t = torch.zeros(t.shape, dtype=t.dtype)
        return Val(self.g.constant(t))

    def scalar(self, x, like: Val | None = None) -> Val:
        """A weak 0-d constant, promoted as PyTorch promotes a Python scalar."""
        if isinstance(x, bool):
            return Val(self.g.scalar_int(int(x), torch.bool))
        if isinstance(x, int):
            ldt = self.dtype(like) if like is not None else None
            if ldt is not None and ldt.is_floating_point:
                return Val(self.g.scalar(float(x), torch.float64 if ldt == torch.float64 else torch.float32))
            if ldt in _NARROW_INTS:
                # Wrapped to the tensor's dtype first, as the CPU casts a Python int (uint8 % 300
                # is uint8 % 44, uint8 > -3 compares with 253).
                bits = ldt.itemsize * 8
                x &= (1 << bits) - 1
                if ldt.is_signed and x >= 1 << (bits - 1):
                    x -= 1 << bits
            elif not -(1 << 63) <= x < 1 << 63:
                # A Python int in [2^63, 2^64) is a uint64 scalar that an int64 computation wraps
                # (64-bit hashing constants); anything wider the eager kernel refuses as the CPU does.
                if not 0 <= x < 1 << 64:
                    raise Unsupported(f"integer scalar {x} outside the 64-bit range")
                x -= 1 << 64
            return Val(self.g.scalar_int(x, ldt if ldt not in (None, torch.bool) else torch.int64))
        if isinstance(x, float):
            dt = torch.float64 if like is not None and self.dtype(like) == torch.float64 else torch.float32
            return Val(self.g.scalar(x, dt))
        raise Unsupported(f"scalar argument of type {type(x).__name__}")

    def v(self, x, like: Val | None = None) -> Val:
        return x if isinstance(x, Val) else self.scalar(x, like)

    # --- ops --------------------------------------------------------------------------------
    def op(self, name, inputs, ints=(), floats=(), s="", dtype=None, sizes=()) -> Val:
        if name in LIBRARY_OPS:
            # The same rule as the verifier's: library kernels take floating operands (and bool
            # masks). Anything else is untranslatable here, so the node becomes a library step.
            bad = [self.dtype(i) for i in inputs if self.dtype(i) not in LIBRARY_DTYPES + (torch.bool,)]
            if bad or (dtype is not None and dtype not in LIBRARY_DTYPES):
                raise Unsupported(f"{name} of dtype {bad[0] if bad else dtype}")
        ids = [i.id for i in inputs]
        return Val(self.g.add(name, ids, [int(i) for i in ints], [float(f) for f in floats], s, dtype,
                              [int(n) for n in sizes], self.source))

    def opaque(self, name, inputs, dtype, sizes) -> Val:
        return Val(self.g.opaque(name, [i.id for i in inputs], dtype, list(sizes), self.source))

    def unary(self, name, x) -> Val:
        return self.op(name, [x])

    def binary(self, name, a, b) -> Val:
        """`a` or `b` may be Python scalars (weak); at least one is a Val."""
        like = a if isinstance(a, Val) else b
        if name == "div" and not self.dtype(like).is_floating_point:
            # True division computes in floating point: an integer tensor's Python int operand is
            # a float there (int8 / 300 divides by 300.0), not wrapped to the tensor's dtype.
            a, b = (float(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in (a, b))
        return self.op(name, [self.v(a, like), self.v(b, like)])

    def add(self, a, b): return self.binary("add", a, b)
    def sub(self, a, b): return self.binary("sub", a, b)
    def mul(self, a, b): return self.binary("mul", a, b)
    def div(self, a, b): return self.binary("div", a, b)

    def where(self, c, a, b) -> Val:
        like = a if isinstance(a, Val) else b if isinstance(b, Val) else None
        if like is None:
            dt = torch.float32 if isinstance(a, float) or isinstance(b, float) else torch.int64
            a, b = self.full([], a, dt), self.full([], b, dt)
        return self.op("where", [c, self.v(a, like), self.v(b, like)])

    def cast(self, x: Val, dtype) -> Val:
        if self.dtype(x) == dtype:
            return x
        return self.op("convert_element_type", [x], dtype=dtype, sizes=self.sizes(x))

    def rounded(self, x: Val) -> Val:
        """x rounded (wrapped, for integers) to its own dtype: generated code keeps float16 and
        bfloat16 values in float32 registers and narrow integers in 64-bit ones until a store."""
        return self.op("convert_element_type", [x], dtype=self.dtype(x), sizes=self.sizes(x))

    def full(self, sizes, value, dtype) -> Val:
        check_fits(value, dtype)
        # An integer value also travels exactly (a double holds only 53 bits of it).
        ints = [int(value)] if isinstance(value, int) and not dtype.is_floating_point else []
        return self.op("full", [], ints=ints, floats=[float(value)], dtype=dtype, sizes=sizes)

    def pad(self, x, spec, value=0.0) -> Val:
        """spec: one (lo, hi, step) per dim of x: element i lands at lo + i * step, the rest is
        `value` (an index map the compiler fuses as masked loads)."""
        ints = [int(v) for lohistep in spec for v in lohistep]
        if all(s == (0, 0, 1) for s in map(tuple, spec)):
            return x
        return self.op("pad", [x], ints=ints, floats=[float(value)])

    def placed(self, x, dim, size, start, step=1) -> tuple:
        """x placed along `dim` of a tensor whose size there is `size`, from `start` every `step`:
        (the padded x, a bool mask of where x landed)."""
        sizes = self.sizes(x)
        n = sizes[dim]
        spec = [(0, 0, 1)] * len(sizes)
        spec[dim] = (start, size - (start + (n - 1) * step + 1) if n else size - start, step)
        mask = self.pad(self.full(sizes, 1, torch.bool), spec, 0)
        return self.pad(x, spec, 0), mask

    def reduce(self, name, x, dims, keepdim) -> Val:
        return self.op(name, [x], ints=[1 if keepdim else 0, *dims])

    def reshape(self, x, sizes) -> Val:
        return x if list(self.sizes(x)) == list(sizes) else self.op("reshape", [x], ints=sizes)

    def expand(self, x, sizes) -> Val:
        return x if list(self.sizes(x)) == list(sizes) else self.op("expand", [x], ints=sizes)

    def unsqueeze(self, x, dim) -> Val:
        return self.op("unsqueeze", [x], ints=[dim])

    def permute(self, x, perm) -> Val:
        return x if list(perm) == list(range(len(perm))) else self.op("permute", [x], ints=perm)

    def slice(self, x, dim, start, end, step=1) -> Val:
        return self.op("slice", [x], ints=[dim, start, end, step])

    # --- queries ----------------------------------------------------------------------------
    def sizes(self, x: Val) -> list:
        return self.g.node_sizes(x.id)

    def dtype(self, x: Val):
        return self.g.node_dtype(x.id)

    def op_of(self, x: Val) -> str:
        return self.g.node_op(x.id)

    def num_nodes(self) -> int:
        return self.g.num_nodes()
