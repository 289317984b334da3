"""Compile-time constant folding: a node that depends on no graph input (masks built from
arange, position tables) is evaluated once, with eager kernels, while compiling, and enters the
IR as a constant. This is how mask construction written with ops the compiler has no lowering
for (cumsum, advanced indexing, vmap'd comparisons) still compiles whole."""
import operator

import torch

aten = torch.ops.aten
_MAX_ELEMENTS = 1 << 20  # larger results are computed at run time instead


def _nondeterministic(target) -> bool:
    if not isinstance(target, torch._ops.OpOverload):
        return target is not operator.getitem
    return torch.Tag.nondeterministic_seeded in target.tags or target._schema.is_mutable


def foldable_nodes(gm: torch.fx.GraphModule) -> set:
    folded = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            folded.add(node)
        elif node.op == "call_function" and not _nondeterministic(node.target) \
                and all(a in folded for a in node.all_input_nodes):
            val = node.meta.get("val")
            vals = val if isinstance(val, (list, tuple)) else [val]
            # Complex values cannot be IR constants: such a node (a rotary table built with
            # torch.polar) runs at run time, as an eager step, from its folded real inputs.
            if all(not isinstance(v, torch.Tensor) or (v.numel() <= _MAX_ELEMENTS and not v.is_complex())
                   for v in vals):
                folded.add(node)
    return folded


def evaluate(gm, node, consts: dict):
    """The node's real value, from the real values of its (folded) inputs."""
    if node.op == "get_attr":
        return getattr(gm, node.target)
    # On the host: the values become IR constants (host bytes) anyway, and ops without an ember
    # kernel would otherwise show up in the eager fallback report.
    def host(x):
        return x.cpu() if isinstance(x, torch.Tensor) else x
    args = torch.fx.node.map_aggregate(torch.fx.node.map_arg(node.args, lambda n: consts[n]), host)
    kwargs = torch.fx.node.map_aggregate(torch.fx.node.map_arg(node.kwargs, lambda n: consts[n]), host)
    if "device" in kwargs:
        kwargs = dict(kwargs, device=torch.device("cpu"))
    return node.target(*args, **kwargs)
