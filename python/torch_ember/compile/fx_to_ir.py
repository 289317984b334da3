"""FX (core ATen) graph -> Ember IR.

`translate(gm, input_strides)` walks the graph in order, lowers each call through LOWERINGS and
returns a Translation: the IR graph plus what the runner needs to feed it and rebuild the FX
outputs from the executable's outputs.

Aliasing. Graph outputs that are views (of an input or of a computed value) are not
materialized: the runner replays their view ops eagerly on the real base tensor, so they alias
exactly as in eager mode (AOTAutograd relies on output aliasing metadata). A `copy_` into a
graph input (a mutation AOTAutograd left in the graph) becomes an in-place output of the IR.
Untranslatable nodes become opaque IR nodes, so the compiler's verifier reports all of them
with their source lines at once."""
import operator
from dataclasses import dataclass, field

import torch

from .builder import LIBRARY_OPS, SUPPORTED_DTYPES, Builder, Val
from .errors import CompileError, Unsupported
from .folding import evaluate, foldable_nodes
from .lowering import LOWERINGS
from .source import node_source

aten = torch.ops.aten
# Ops whose result aliases their first argument; an output made of these is replayed eagerly
# (AOTAutograd's forward returns `detach(x)` beside `x` to save for the backward: replayed, it
# shares x's memory as in eager, where lowered it would be a second output and a copy).
VIEW_OPS = {
    aten.detach.default,
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.expand.default,
    aten.permute.default, aten.t.default, aten.transpose.int, aten.slice.Tensor, aten.select.int,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
    aten.alias.default, aten.as_strided.default, aten.diagonal.default, aten.unfold.default,
    aten.view.dtype,
}


# Ops that return several views of their first argument; an output taken from their result by
# getitem is replayed as the op and the getitem.
MULTI_VIEW_OPS = {aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int}


def _view_step(node):
    """The view ops from `node` back to the tensor it views, innermost first, and that tensor;
    ([], node) when node is no view."""
    if not isinstance(node, torch.fx.Node):
        return [], node
    if node.target in VIEW_OPS:
        return [node], node.args[0]
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and \
            node.args[0].target in MULTI_VIEW_OPS:
        return [node, node.args[0]], node.args[0].args[0]
    return [], node


# Dtypes ember tensors can hold (storage and copies) but no kernel computes on, so no IR value
# may have them.
_NO_DEVICE_DTYPES = (torch.uint16, torch.uint32, torch.uint64, torch.complex32)


def op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._schema.name.split('::')[-1]}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def _meta_tensors(node):
    v = node.meta.get("val")
    if isinstance(v, (list, tuple)):
        return [t for t in v if isinstance(t, torch.Tensor)]
    return [v] if isinstance(v, torch.Tensor) else []


def is_static(gm) -> bool:
    """Every size and stride in the graph is a number."""
    for node in gm.graph.nodes:
        for t in _meta_tensors(node):
            if any(not isinstance(s, int) for s in (*t.shape, *t.stride())):
                return False
        if node.op == "placeholder" and isinstance(node.meta.get("val"), torch.SymInt):
            return False
    return True


def _map_args(x, env):
    if isinstance(x, torch.fx.Node):
        return env[x]
    if isinstance(x, (list, tuple)):
        return type(x)(_map_args(a, env) for a in x)
    if isinstance(x, dict):
        return {k: _map_args(v, env) for k, v in x.items()}
    return x


# Every op's result is rounded to its dtype as eager mode's kernel stores it: generated code keeps
# float16/bfloat16 values in float32 registers and narrow integers in 64-bit ones, so without
# this a chain of ops fused into one kernel would skip eager's roundings (a float16 product that
# overflows to inf eagerly stayed finite; int32 and uint8 arithmetic did not wrap). Only the FX
# node's result is rounded: a lowering that composes one ATen op from several IR ops computes its
# intermediates unrounded, as the op's eager kernel does. Ops that compute nothing new (views,
# casts, library calls that store their result) need no rounding.
_ROUNDED = (torch.float16, torch.bfloat16, torch.uint8, torch.int8, torch.int16, torch.int32, torch.float8_e4m3fn,
            torch.float8_e5m2)
_NOT_COMPUTING = frozenset({"input", "constant", "convert_element_type", "expand", "reshape", "permute", "transpose",
                            "slice", "squeeze", "unsqueeze", "opaque"}) | LIBRARY_OPS


def _check_result(b, node, val, first_new):
    """Matches the lowering's result to the node's meta: same sizes, dtype by a cast, rounded
    where eager rounds. first_new: the first IR node id the lowering created."""
    m = node.meta.get("val")
    if isinstance(val, tuple):
        ms = m if isinstance(m, (list, tuple)) else [m] * len(val)
        return tuple(None if v is None or not isinstance(mm, torch.Tensor) else _check_one(b, node, v, mm, first_new)
                     for v, mm in zip(val, ms))
    return _check_one(b, node, val, m, first_new)


def _check_one(b, node, v, m, first_new):
    if not isinstance(v, Val) or not isinstance(m, torch.Tensor):
        return v
    if list(b.sizes(v)) != list(m.shape):
        raise Unsupported(f"lowering produced sizes {b.sizes(v)}, expected {list(m.shape)}")
    out = b.cast(v, m.dtype)
    if out is v and m.dtype in _ROUNDED and v.id >= first_new and b.op_of(v) not in _NOT_COMPUTING:
        out = b.rounded(v)
    return out


def lower_node(b: Builder, node, env) -> object:
    """Lowers one call_function node; raises Unsupported when it cannot."""
    if node.target is operator.getitem:
        src, idx = node.args
        val = env[src]
        if not isinstance(val, tuple) or not -len(val) <= idx < len(val) or val[idx] is None:
            raise Unsupported("getitem of an untranslated output")
        return val[idx]
    fn = LOWERINGS.get(node.target)
    if fn is None:
        raise Unsupported("no lowering")
    for t in _meta_tensors(node):
        if t.dtype not in SUPPORTED_DTYPES:
            raise Unsupported(f"dtype {t.dtype}")
    # Inputs too: abs or real of a complex tensor (from a library step such as an FFT) has a
    # real result, but no lowering reads complex values.
    for a in node.all_input_nodes:
        for t in _meta_tensors(a):
            if t.dtype not in SUPPORTED_DTYPES:
                raise Unsupported(f"input of dtype {t.dtype}")
    args, kwargs = _map_args(node.args, env), _map_args(node.kwargs, env)
    first_new = b.num_nodes()
    return _check_result(b, node, fn(b, node, *args, **kwargs), first_new)


def dense_order(val):
    """The dims of `val` from outermost to innermost in memory when it is dense and not
    row-major (channels_last, a transposed result); None otherwise."""
    if not isinstance(val, torch.Tensor) or val.layout != torch.strided or val.dim() < 2 \
            or any(not isinstance(n, int) for n in (*val.shape, *val.stride())) or val.is_contiguous():
        return None
    perm = sorted(range(val.dim()), key=lambda d: (-val.stride(d), d))
    sizes = [val.shape[d] for d in perm]
    expect = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        expect[i] = expect[i + 1] * max(sizes[i + 1], 1)
    if any(sizes[i] > 1 and val.stride(d) != expect[i] for i, d in enumerate(perm)):
        return None
    return perm


def _opaque(b, node, env, reason):
    ins = _flat_vals(_map_args(node.args, env))
    name = op_name(node.target) + (f" ({reason})" if reason and reason != "no lowering" else "")
    outs = node.meta.get("val")
    if isinstance(outs, (list, tuple)):
        return tuple(b.opaque(name, ins, t.dtype, list(t.shape)) if isinstance(t, torch.Tensor) else None
                     for t in outs)
    if isinstance(outs, torch.Tensor):
        return b.opaque(name, ins, outs.dtype, list(outs.shape))
    return b.opaque(name, ins, torch.float32, [])


def _flat_vals(x):
    out = []
    if isinstance(x, Val):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for a in x:
            out.extend(_flat_vals(a))
    return out


def _const_val(b, value):
    # A complex constant (a lifted complex literal) has no IR form: it stays a value, and the
    # complex ops reading it run as eager steps.
    if isinstance(value, torch.Tensor) and not value.is_complex():
        return b.constant(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_const_val(b, v) for v in value)
    return value


@dataclass
class Translation:
    builder: Builder
    input_positions: list  # placeholder index of each IR input, in IR input order
    input_strides: list  # the strides each IR input was declared with
    input_to_device: list  # IR input that arrives on the CPU (a 0-d scalar) and must be moved
    input_dtypes: list  # the dtype each IR input was compiled for
    # One entry per FX output: ("exe", i) | ("arg", placeholder index) | ("const", value) |
    # ("view", base entry, [(target, args, kwargs), ...], base strides) replayed eagerly on the
    # base, which first gets the strides it had when traced (an executable's outputs are
    # contiguous; a view traced on a transposed base would not apply to them).
    results: list = field(default_factory=list)
    tuple_output: bool = True
    num_exe_outputs: int = 0
    fx_nodes: int = 0
    untranslatable: list = field(default_factory=list)  # (op name, source, reason)
    cache_key: str = ""  # the compile cache's key of the executable built from `builder`
    # Executable output index -> the dim order it is written in (outermost first), for results
    # traced in a dense layout other than row-major; the caller gets them in that layout.
    output_layouts: dict = field(default_factory=dict)
    # Positions in `results` that eager mode returns on the CPU (computed from CPU scalar inputs
    # only): the executable computes them on the device and the caller gets them back on the CPU.
    cpu_results: list = field(default_factory=list)


def _ir_dtypes(node) -> bool:
    """Whether the node's tensor arguments have dtypes the IR computes in (a complex input's
    in-place update runs as a library step instead)."""
    vals = [a.meta.get("val") for a in node.args if isinstance(a, torch.fx.Node)]
    return all(not isinstance(v, torch.Tensor) or v.dtype in SUPPORTED_DTYPES for v in vals)


def translate(gm: torch.fx.GraphModule, input_strides=None) -> Translation:
    b = Builder()
    env = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    positions, strides_used, to_device, dtypes = [], [], [], []
    ir_input_of = {}  # placeholder index -> IR input index
    untranslatable = []
    for i, p in enumerate(placeholders):
        val = p.meta.get("val")
        if isinstance(val, torch.Tensor):
            strides = list(input_strides[i]) if input_strides and input_strides[i] is not None \
                else list(val.stride())
            if val.dtype in _NO_DEVICE_DTYPES:
                user = next(iter(p.users), None)
                where = f"{op_name(user.target)} at {node_source(user)}" if user is not None else "the graph"
                raise CompileError(f"ember: dtype {val.dtype} is not supported on the ember device (graph input "
                                   f"{p.name}, used by {where}); eager mode refuses its arithmetic too")
            if val.dtype not in SUPPORTED_DTYPES:
                # A complex input, say: the IR may carry it, no lowering accepts it, so the nodes
                # that use it become library steps (or are refused if they have no ember kernel).
                untranslatable.append(("input", "", f"graph input {p.name} of dtype {val.dtype}"))
            b.source = ""
            env[p] = b.input(val.dtype, list(val.shape), strides, p.name)
            ir_input_of[i] = len(positions)
            positions.append(i)
            strides_used.append(tuple(strides))
            to_device.append(val.device.type != "ember")
            dtypes.append(val.dtype)
        else:
            env[p] = val

    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    out_args = out_node.args[0]
    tuple_output = isinstance(out_args, (list, tuple))
    out_list = list(out_args) if tuple_output else [out_args]

    # Outputs that are view chains: replayed on their base, which must then be an IR output.
    view_chains = {}
    for o in out_list:
        chain, base = _view_step(o)
        if not chain:
            continue
        while True:
            more, below = _view_step(base)
            if not more:
                break
            chain += more
            base = below
        view_chains[o] = (base, list(reversed(chain)))

    ph_index = {p: i for i, p in enumerate(placeholders)}
    fx_nodes = 0
    num_marked = 0  # IR outputs so far: in-place (alias) outputs come first
    folded = foldable_nodes(gm)
    consts = {}
    for node in gm.graph.nodes:
        if node in folded:
            consts[node] = value = evaluate(gm, node, consts)
            b.source = node_source(node)
            env[node] = _const_val(b, value)
        elif node.op == "call_function":
            fx_nodes += 1
            b.source = node_source(node)
            if node.target is aten.copy_.default and node.args[0] in ph_index and _ir_dtypes(node):
                dst, src = node.args
                ir_in = ir_input_of.get(ph_index[dst])
                new = b.expand(b.cast(env[src], b.dtype(env[dst])), b.sizes(env[dst]))
                b.g.mark_output_alias(new.id, ir_in)
                num_marked += 1
                env[node] = new
                continue
            try:
                env[node] = lower_node(b, node, env)
            except Unsupported as e:
                untranslatable.append((op_name(node.target), b.source, str(e)))
                env[node] = _opaque(b, node, env, str(e))

    exe_outputs = {}  # Val id -> (exe output index, FX node)

    def exe_output(val, node):
        nonlocal num_marked
        first = exe_outputs.get(val.id)  # (output index, the FX node first returned as it)
        if first is None or first[1] is not node:
            # Another FX value that lowered to the same IR value (a clone or copy lowers to its
            # source) is a tensor of its own: it gets its own output buffer (a copy).
            b.g.mark_output(val.id)
            num_marked += 1
            if first is None:
                exe_outputs[val.id] = (num_marked - 1, node)
            return ("exe", num_marked - 1)
        return ("exe", first[0])

    def entry(o):
        if isinstance(o, torch.fx.Node):
            if o.op == "placeholder":
                return ("arg", ph_index[o])
            if o in view_chains:
                base, chain = view_chains[o]
                replay = [(n.target, n.args[1:], dict(n.kwargs)) for n in chain]
                bval = base.meta.get("val") if isinstance(base, torch.fx.Node) else None
                bstrides = tuple(bval.stride()) if isinstance(bval, torch.Tensor) else None
                return ("view", entry(base), replay, bstrides)
            if o in memo:
                return memo[o]
            v = env[o]
            if not isinstance(v, Val):
                return ("const", v)
            perm = dense_order(o.meta.get("val"))
            if perm is None:
                memo[o] = exe_output(v, o)
            else:
                # A result traced in another dense layout (channels_last, a transpose): the
                # executable writes it in that memory order, into a tensor with the strides
                # eager would give (not a view: autograd lets the caller modify it in place).
                memo[o] = exe_output(b.permute(v, perm), o)
                output_layouts[memo[o][1]] = perm
            return memo[o]
        return ("const", o)

    memo, output_layouts = {}, {}
    results = [entry(o) for o in out_list]
    cpu_results = [i for i, o in enumerate(out_list) if results[i][0] in ("exe", "view") and
                   isinstance(o, torch.fx.Node) and isinstance(o.meta.get("val"), torch.Tensor) and
                   o.meta["val"].device.type == "cpu"]
    return Translation(b, positions, strides_used, to_device, dtypes, results, tuple_output,
                       num_marked, fx_nodes, untranslatable, output_layouts=output_layouts,
                       cpu_results=cpu_results)
