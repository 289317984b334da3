"""Split a graph into maximal partitions that Ember can translate; whatever is left runs as
eager ATen calls on ember tensors: library steps (ember's eager kernels), or, under
fallback="eager", the CPU fallback.

Support is decided by lowering each node alone into a scratch IR graph, with the same code the
real translation uses, so the partitioner and the translator cannot disagree."""
import operator

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from .builder import Builder, Val
from .errors import Unsupported
from .folding import foldable_nodes
from .fx_to_ir import VIEW_OPS, _meta_tensors, lower_node, op_name
from .op_table import compile_route
from .source import node_source

aten = torch.ops.aten


def _scratch_value(b, x):
    v = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if isinstance(v, torch.Tensor):
        return b.input(v.dtype, list(v.shape), list(v.stride()))
    if isinstance(v, (list, tuple)):
        return tuple(b.input(t.dtype, list(t.shape), list(t.stride())) if isinstance(t, torch.Tensor)
                     else None for t in v)
    return v


def translatable(node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return translatable(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else False
    if any(t.device.type != "ember" for t in _meta_tensors(node)):
        return False
    b = Builder()
    env = {}
    for a in node.all_input_nodes:
        try:
            env[a] = _scratch_value(b, a)
        except Exception:
            return False
    try:
        out = lower_node(b, node, env)
    except Unsupported:
        return False
    except Exception:
        return False
    return isinstance(out, (Val, tuple))


class _EmberSupport(OperatorSupportBase):
    def __init__(self, known):
        super().__init__()
        self.known = known

    def is_node_supported(self, submodules, node) -> bool:
        return self.known[node] if node in self.known else translatable(node)


def _route(node) -> str:
    if getattr(node.target, "__name__", None) == "with_effects" and len(node.args) > 1:
        # with_effects(token, op, *args) runs `op`: its route is the op's.
        return _route_of_target(node.args[1])
    return _route_of_target(node.target)


def _route_of_target(target) -> str:
    route = compile_route(target)
    # An op that has a lowering but not for this call (a dtype, an attribute) still has its eager
    # kernel; a CPU tensor among its arguments makes it run where that tensor is, as in eager.
    if route in ("fused", "decompose"):
        from .op_table import runs_eagerly_on_ember
        route = "library" if runs_eagerly_on_ember(target) else "none"
    return route


def host_scalar(node) -> bool:
    """A Python number computed on the host (int(x.item()) // 2, max(n, 1), a size's product):
    nothing for the device to run, and not an op that could lack a kernel."""
    if node.op != "call_function" or isinstance(node.target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return False
    return not isinstance(node.meta.get("val"), (torch.Tensor, list, tuple))


def partition(gm: torch.fx.GraphModule):
    """Returns (split graph module or None when everything translates, names of the Ember
    submodules, [(op, source, route)] of the nodes left to eager, route being op_table's
    compile route of the op: "library" for an op with an eager ember kernel)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        folded = foldable_nodes(gm)
        known = {n: n in folded or translatable(n) for n in gm.graph.nodes if n.op == "call_function"}
    eager = [(op_name(n.target), node_source(n), _route(n)) for n, ok in known.items()
             if not ok and n.target is not operator.getitem and n.target not in VIEW_OPS and not host_scalar(n)]
    if all(known.values()):
        return None, [], []
    partitioner = CapabilityBasedPartitioner(gm, _EmberSupport(known), allows_single_node_partition=True)
    parts = partitioner.propose_partitions()
    # A partition of views alone computes nothing; leave those to eager too.
    parts = [p for p in parts if any(n.target not in VIEW_OPS and n.target is not operator.getitem
                                     for n in p.nodes)]
    split = partitioner.fuse_partitions(parts, prefix="ember_")
    names = [n.target for n in split.graph.nodes if n.op == "call_module"]
    return split, names, eager
