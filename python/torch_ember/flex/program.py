"""score_mod / mask_mod (and score_mod's gradient) as programs for Ember's fused FlexAttention
kernels (csrc/core/kernels/attention/flex_program.h).

A mod is traced to ATen ops on 0-d tensors (make_fx, with PyTorch's rule that `buf[idx]` is an
index op), and each node becomes one instruction over whole rows of scores. Values are doubles in
the kernel; a node whose traced dtype is float32 rounds to float32, which gives float32's results
for + - * / and sqrt. Any op, dtype or shape outside that set raises `Unsupported`, and the caller
runs PyTorch's dense implementation instead: unsupported code is slower, never wrong.
"""
from dataclasses import dataclass, field

import torch

aten = torch.ops.aten

# Opcodes, in the order of flex::Op.
OPCODES = {name: i for i, name in enumerate((
    "score", "grad", "batch", "head", "query", "key", "const",
    "add", "sub", "mul", "div", "neg", "abs", "exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "pow",
    "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor", "not",
    "where", "floor_divide", "remainder", "floor", "ceil", "trunc", "round", "to_bool", "to_int", "load",
    "tanh_backward", "sigmoid_backward", "exp2", "log2", "reciprocal", "sin", "cos"))}


class Unsupported(Exception):
    """The mod uses something the kernels do not evaluate; the dense implementation runs it."""


def _packet(op):
    return op.overloadpacket if isinstance(op, torch._ops.OpOverload) else op


UNARY = {aten.neg: "neg", aten.abs: "abs", aten.exp: "exp", aten.log: "log", aten.tanh: "tanh",
         aten.sigmoid: "sigmoid", aten.sqrt: "sqrt", aten.rsqrt: "rsqrt", aten.logical_not: "not",
         aten.floor: "floor", aten.ceil: "ceil", aten.trunc: "trunc", aten.round: "round", aten.exp2: "exp2",
         aten.log2: "log2", aten.reciprocal: "reciprocal", aten.sin: "sin", aten.cos: "cos"}
BINARY = {aten.mul: "mul", aten.maximum: "maximum", aten.minimum: "minimum",
          aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
          aten.logical_and: "and", aten.logical_or: "or", aten.logical_xor: "xor",
          aten.floor_divide: "floor_divide", aten.remainder: "remainder", aten.pow: "pow",
          aten.tanh_backward: "tanh_backward", aten.sigmoid_backward: "sigmoid_backward"}
# Bitwise ops on bools are logical ones (mask_mods combine conditions with & and |).
BOOL_BINARY = {aten.bitwise_and: "and", aten.bitwise_or: "or", aten.bitwise_xor: "xor"}
IDENTITY = {aten.clone, aten.alias, aten.detach, aten.detach_, aten.lift_fresh_copy, aten.lift_fresh, aten.view, aten.reshape,
            aten._unsafe_view, aten.expand, aten.squeeze, aten.unsqueeze, aten.contiguous}


@dataclass
class Program:
    code: list = field(default_factory=list)      # [num_regs, result, 8 ints per instruction...]
    constants: list = field(default_factory=list)
    buffers: list = field(default_factory=list)   # tensors, in the order loads name them
    result: int = 0
    num_regs: int = 0
    # Gradient programs: (target, index registers, value register) per scatter, where target is
    # the position of the captured tensor (among the graph's buffers) whose gradient it adds to.
    scatters: list = field(default_factory=list)

    def encoded(self):
        return [self.num_regs, self.result] + self.code

    def scatter_code(self):
        """6 ints per scatter, its target as a position in scatter_targets()."""
        targets = self.scatter_targets()
        out = []
        for target, idx, value in self.scatters:
            out += [targets.index(target)] + list(idx) + [-1] * (4 - len(idx)) + [value]
        return out

    def scatter_targets(self):
        return sorted({t for t, _, _ in self.scatters})


class _Builder:
    def __init__(self):
        self.p = Program()
        self.values = {}   # fx node -> register, or ("buffer", index)

    def reg(self):
        self.p.num_regs += 1
        return self.p.num_regs - 1

    def emit(self, op, a=-1, b=-1, c=-1, d=-1, e=-1, f32=False):
        dst = self.reg()
        self.p.code += [OPCODES[op], dst, a, b, c, d, e, int(f32)]
        return dst

    def const(self, value):
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, (int, float)):
            raise Unsupported(f"constant {value!r}")
        self.p.constants.append(float(value))
        return self.emit("const", c=len(self.p.constants) - 1)

    def buffer(self, tensor):
        for i, t in enumerate(self.p.buffers):
            if t is tensor:
                return i
        self.p.buffers.append(tensor)
        return len(self.p.buffers) - 1

    def operand(self, x):
        if isinstance(x, torch.fx.Node):
            v = self.values.get(x)
            if v is None:
                raise Unsupported(f"value {x.name}")
            if isinstance(v, tuple):  # a whole tensor used as a value
                raise Unsupported(f"tensor {x.name} used without indexing")
            return v
        return self.const(x)


def _dtype(node):
    val = node.meta.get("val")
    return val.dtype if isinstance(val, torch.Tensor) else None


def _is_scalar(node):
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dim() == 0


def build(gm: torch.fx.GraphModule, roles, buffers=()) -> Program:
    """Program of a traced mod. `roles` names its leading placeholders ("score", "grad", "batch",
    "head", "query", "key"); the placeholders after them are `buffers` (tensors), then any
    constants the graph holds. The output is the first (or only) output of the graph."""
    bld = _Builder()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) < len(roles):
        raise Unsupported("fewer inputs than expected")
    extra = placeholders[len(roles):]
    if len(extra) != len(buffers):
        raise Unsupported("captured values do not match the graph's inputs")
    for node, role in zip(placeholders, roles):
        bld.values[node] = bld.emit(role)
    for node, t in zip(extra, buffers):
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            bld.values[node] = ("buffer", bld.buffer(t))
        elif isinstance(t, torch.Tensor):
            bld.values[node] = ("scalar_tensor", t)
        elif isinstance(t, (int, float, bool)):
            bld.values[node] = bld.const(t)
        else:
            raise Unsupported(f"input of type {type(t).__name__}")
    result = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            t = getattr(gm, node.target)
            if not isinstance(t, torch.Tensor):
                raise Unsupported(f"attribute {node.target}")
            bld.values[node] = ("buffer", bld.buffer(t)) if t.dim() > 0 else ("scalar_tensor", t)
            continue
        if node.op == "output":
            out = node.args[0]
            if isinstance(out, (tuple, list)):
                if any(o is not None for o in out[1:5]):
                    raise Unsupported("gradients for the index inputs")
                for target, grad in enumerate(out[5:]):  # captured tensors' gradients
                    if grad is None:
                        continue
                    v = bld.values.get(grad)
                    buf = buffers[target] if target < len(buffers) else None
                    if not (isinstance(v, tuple) and v[0] == "scatter") and isinstance(buf, torch.Tensor) \
                            and buf.dim() == 0:
                        # A 0-d captured tensor (a learned temperature or softcap): every score
                        # adds its value to the one element (hop.py hands the kernel a 1-element view).
                        v = ("scatter", [([bld.const(0)], bld.operand(grad))])
                    if not (isinstance(v, tuple) and v[0] == "scatter"):
                        raise Unsupported("a captured tensor's gradient that is not a scatter")
                    bld.p.scatters += [(target, idx, value) for idx, value in v[1]]
                out = out[0]
            if not isinstance(out, torch.fx.Node):
                raise Unsupported("a constant output")
            result = bld.operand(out)
            continue
        if node.op != "call_function":
            raise Unsupported(node.op)
        _lower(bld, node)
    if result is None:
        raise Unsupported("no output")
    bld.p.result = result
    return bld.p


def _scalar_value(bld, x):
    """A 0-d tensor input or attribute used as a value: its number, now."""
    v = bld.values.get(x) if isinstance(x, torch.fx.Node) else None
    if isinstance(v, tuple) and v[0] == "scalar_tensor":
        t = v[1]
        if t.device.type == "meta" or isinstance(t, torch._subclasses.FakeTensor):
            raise Unsupported("a value-less 0-d tensor")
        reg = bld.const(t.item())
        bld.values[x] = reg
        return reg
    return bld.operand(x)


def _zeros_and_scatter():
    # FlexAttention's joint graphs add a captured tensor's gradient with this op (registered
    # when torch._dynamo's trace_wrapped module loads, which FlexAttention imports).
    lib = getattr(torch.ops, "flex_lib", None)
    return getattr(lib, "zeros_and_scatter", None) if lib is not None else None


def _is_scatter(bld, x):
    v = bld.values.get(x) if isinstance(x, torch.fx.Node) else None
    return isinstance(v, tuple) and v[0] == "scatter"


def _lower(bld, node):
    op, args, kwargs = node.target, node.args, node.kwargs
    pk = _packet(op)
    val = lambda x: _scalar_value(bld, x)  # noqa: E731
    scatter_op = _zeros_and_scatter()
    if scatter_op is not None and pk is scatter_op:  # the gradient of a captured tensor
        shape, idx, value = args
        regs = [val(i) for i in idx]
        if len(regs) != len(shape) or len(regs) > 4:
            raise Unsupported("a scatter that does not pick one element")
        bld.values[node] = ("scatter", [(regs, val(value))])
        return
    if pk is aten.add and _is_scatter(bld, args[0]) and _is_scatter(bld, args[1]):  # a tensor read twice
        bld.values[node] = ("scatter", bld.values[args[0]][1] + bld.values[args[1]][1])
        return
    dtype = _dtype(node)
    f32 = dtype == torch.float32
    if dtype is not None and dtype not in (torch.float32, torch.float64, torch.bool, torch.int32, torch.int64,
                                           torch.int16, torch.int8, torch.uint8):
        if pk is not aten.index:  # a bfloat16/float16 value would need rounding to its type
            raise Unsupported(f"{dtype} values")
    if not _is_scalar(node):
        raise Unsupported(f"{node.target}: a non-scalar value")
    if pk in IDENTITY:
        bld.values[node] = val(args[0])
    elif pk is aten.index:
        src, idx = args
        v = bld.values.get(src)
        if not (isinstance(v, tuple) and v[0] == "buffer"):
            raise Unsupported("indexing something other than a captured tensor")
        buf = bld.p.buffers[v[1]]
        if len(idx) != buf.dim() or any(i is None for i in idx) or buf.dim() > 4:
            raise Unsupported("indexing that does not pick one element")
        regs = [val(i) for i in idx] + [-1] * (4 - len(idx))
        bld.values[node] = bld.emit("load", a=regs[0], b=regs[1], c=v[1], d=regs[2], e=regs[3],
                                    f32=_dtype(node) == torch.float32)
    elif pk in (aten.add, aten.sub, aten.rsub):
        a, b = val(args[0]), val(args[1])
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        if alpha != 1:
            b = bld.emit("mul", b, bld.const(alpha), f32=f32)
        if pk is aten.rsub:
            a, b = b, a
        bld.values[node] = bld.emit("add" if pk is aten.add else "sub", a, b, f32=f32)
    elif pk is aten.div:
        mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
        a, b = val(args[0]), val(args[1])
        if mode is None:
            bld.values[node] = bld.emit("div", a, b, f32=f32)
        elif mode == "floor":
            bld.values[node] = bld.emit("floor_divide", a, b, f32=f32)
        else:
            bld.values[node] = bld.emit("trunc", bld.emit("div", a, b), f32=f32)
    elif pk in UNARY:
        bld.values[node] = bld.emit(UNARY[pk], val(args[0]), f32=f32)
    elif pk in BINARY:
        bld.values[node] = bld.emit(BINARY[pk], val(args[0]), val(args[1]), f32=f32)
    elif pk in BOOL_BINARY:
        if _dtype(node) != torch.bool:
            raise Unsupported("bitwise ops on integers")
        bld.values[node] = bld.emit(BOOL_BINARY[pk], val(args[0]), val(args[1]))
    elif pk is aten.bitwise_not:
        if _dtype(node) != torch.bool:
            raise Unsupported("bitwise not on integers")
        bld.values[node] = bld.emit("not", val(args[0]))
    elif pk is aten.where:
        bld.values[node] = bld.emit("where", val(args[0]), val(args[1]), val(args[2]), f32=f32)
    elif pk in (aten.clamp, aten.clamp_min, aten.clamp_max):
        x = val(args[0])
        if pk is aten.clamp:
            lo = args[1] if len(args) > 1 else kwargs.get("min")
            hi = args[2] if len(args) > 2 else kwargs.get("max")
        else:
            lo, hi = (args[1], None) if pk is aten.clamp_min else (None, args[1])
        if lo is not None:
            x = bld.emit("maximum", x, val(lo), f32=f32)
        if hi is not None:
            x = bld.emit("minimum", x, val(hi), f32=f32)
        bld.values[node] = x
    elif pk in (aten.scalar_tensor, aten.full):
        value = args[0] if pk is aten.scalar_tensor else args[1]
        bld.values[node] = bld.const(value)
    elif pk in (aten.zeros_like, aten.ones_like, aten.zeros, aten.ones, aten.new_zeros, aten.new_ones):
        bld.values[node] = bld.const(1.0 if pk in (aten.ones_like, aten.ones, aten.new_ones) else 0.0)
    elif pk in (aten.full_like, aten.new_full):
        bld.values[node] = bld.const(args[2] if pk is aten.new_full else args[1])
    elif pk in (aten._to_copy, aten.to, torch.ops.prims.convert_element_type, aten.type_as):
        x = val(args[0])
        if dtype == torch.bool:
            x = bld.emit("to_bool", x)
        elif dtype is not None and not dtype.is_floating_point:
            x = bld.emit("to_int", x)
        elif f32:  # rounds to float32 (x * 1 keeps the sign of zero)
            x = bld.emit("mul", x, bld.const(1.0), f32=True)
        bld.values[node] = x
    else:
        raise Unsupported(f"{node.target}")
