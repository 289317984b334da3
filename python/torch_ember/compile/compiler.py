"""Compile one ATen FX graph (a forward, backward or inference graph from AOTAutograd) into a
callable.

A graph Ember can lower whole becomes one executable. Otherwise the graph is split into its
maximal lowerable pieces, and each node in between runs as a library step: the op's eager
ember kernel, queued on the same stream in order. That is always allowed for an op that has an
eager kernel (op_table.compile_route == "library"), so whatever runs natively in eager also
compiles. An op with no eager kernel (it would run on the CPU) fails the compile naming the op
and its line, unless fallback="eager" asks to run it through the CPU fallback too."""
import logging
import time
import warnings

import torch

from .. import _C
from . import settings
from .errors import CompileError
from .fx_to_ir import op_name, translate
from .source import node_source
from .runner import CompiledGraph, _same_layout
from .stats import CompileRecord

log = logging.getLogger("torch_ember.compile")


def _device_of(gm) -> torch.device:
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and t.device.type == "ember":
                return t.device
    return torch.device("ember", torch.ember.current_device())


def _translate(gm, strides, rec: CompileRecord | None):
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    t0 = time.perf_counter()
    with unset_fake_temporarily():  # constants built while lowering must be real tensors
        tr = translate(gm, strides)
    if rec is not None:
        rec.fx_to_ir_ms += (time.perf_counter() - t0) * 1e3
        rec.fx_nodes += tr.fx_nodes
    return tr


def _build(gm, name, strides, rec: CompileRecord | None, strict_hint: str, tr=None):
    tr = tr or _translate(gm, strides, rec)
    if tr.num_exe_outputs == 0 and not tr.untranslatable:
        return tr, None  # nothing to compute: only inputs and views of them
    cache = settings.cache_dir()
    try:
        exe, stats = _C._compile(tr.builder.g.graph, name, cache, bool(cache))
    except NotImplementedError as e:
        msg = str(e).removeprefix("ember: not supported: ")
        raise CompileError(f"{msg}. {strict_hint}") from None
    if stats["warning"]:
        warnings.warn(f"ember compile cache: {stats['warning']}", RuntimeWarning, stacklevel=2)
    if rec is not None:
        rec.add_compile(stats)
    tr.cache_key = stats["cache_key"]
    return tr, exe


_HINT = ('Run them eagerly instead with torch.compile(..., backend="ember", '
         'options={"fallback": "eager"}).')


def _whole(gm: torch.fx.GraphModule, name: str, rec: CompileRecord, tr=None) -> CompiledGraph:
    tr, exe = _build(gm, name, None, rec, _HINT, tr)
    return CompiledGraph(tr, exe, _device_of(gm),
                         lambda strides: _build(gm, name, strides, None, _HINT), name)


def _refusal(refused) -> CompileError:
    listing = "; ".join(f"op '{op}' at {src or '<unknown>'}" for op, src in refused)
    return CompileError(f"ember compiler cannot translate {len(refused)} op(s): {listing}. These ops have no "
                        f"ember kernel (in eager mode they run on the CPU). {_HINT}")


def _check_steps(steps, rec: CompileRecord, fallback, name: str):
    """Splits (op, line, route) steps into library steps and CPU-fallback ops, refusing the
    latter unless fallback="eager"."""
    library = [(op, src) for op, src, route in steps if route == "library"]
    eager = [(op, src) for op, src, route in steps if route != "library"]
    if eager and fallback != "eager":
        raise _refusal(eager)
    rec.library_ops, rec.eager_ops = library, eager
    if steps:
        log.info("ember %s: %d library step(s) and %d op(s) through the CPU fallback: %s", name, len(library),
                 len(eager), ", ".join(f"{op} at {src or '?'}" for op, src, _ in steps))
    if eager:
        from . import fallback_count
        fallback_count.note(eager)


class _FirstCallFallbacks:
    """A graph with library steps, watched at its first call for CPU fallbacks inside them.

    A library step runs the op's eager kernel, and some eager kernels hand particular arguments
    to the CPU (kthvalue, an N-d searchsorted, a complex sum, indices split by a slice): only
    running it shows that. The results are right, so the graph keeps running, but not silently:
    the first call warns, naming the ops, and they join the graph's `eager_ops` in
    compile_stats() and the compiled-mode part of fallback_report()."""

    def __init__(self, fn, rec: CompileRecord):
        self.fn, self.rec, self.checked = fn, rec, False

    def __call__(self, *args):
        if self.checked:
            return self.fn(*args)
        before = _fallback_calls()
        out = self.fn(*args)
        self.checked = True
        ops = sorted(op for op, n in _fallback_calls().items() if n > before.get(op, 0))
        if ops:
            found = [self._located(op) for op in ops]
            self.rec.eager_ops = self.rec.eager_ops + found
            from . import fallback_count
            fallback_count.note(found)
            listing = "; ".join(f"{op} (in the step at {src or '<unknown>'})" for op, src in found)
            warnings.warn(f"ember compiled graph {self.rec.name} ran {len(found)} op(s) on the CPU: {listing}. "
                          "Their eager ember kernels have no path for these arguments or dtypes; the results "
                          "are right, the data went to the host and back.", RuntimeWarning, stacklevel=2)
        return out

    def _located(self, op: str):
        # The fallback names an overload ("aten::kthvalue.values"), maybe one a composite
        # calls; the step that led to it has the source line.
        base = op.removeprefix("aten::").split(".")[0]
        for step, src in self.rec.library_ops:
            if step.removeprefix("aten.").split(".")[0] == base:
                return op.replace("::", "."), src
        only = self.rec.library_ops[0][1] if len(self.rec.library_ops) == 1 else None
        return op.replace("::", "."), only


def _fallback_calls() -> dict:
    return {rec[0]: rec[1] for rec in _C._fallback_records()}


def watched(fn, rec: CompileRecord):
    """`fn`, watched at its first call when it has library steps (_FirstCallFallbacks)."""
    return _FirstCallFallbacks(fn, rec) if rec.library_ops else fn


def compile_data_dependent(gm: torch.fx.GraphModule, name: str, rec: CompileRecord, fallback=None):
    """A graph whose sizes depend on tensor values (nonzero, masked_select, unique feed later
    ops): static plans cannot be made for it, so every op runs as a library step, in order."""
    import operator

    from .fx_to_ir import VIEW_OPS
    from .partition import _route

    # Only ATen ops are device work; size arithmetic and checks (operator.ge on sizes, say) run
    # on the host as they are.
    steps = [(op_name(n.target), node_source(n), _route(n)) for n in gm.graph.nodes
             if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
             and n.target is not operator.getitem and n.target not in VIEW_OPS]
    _check_steps(steps, rec, fallback, name)
    rec.recompile_reason = rec.recompile_reason or "sizes depend on tensor values: ops run as library steps"
    return watched(gm, rec)


def _in_traced_strides(fn, sub: torch.fx.GraphModule):
    """A piece whose results come back in the strides they were traced with.

    Executables write contiguous results. The split graph around a piece replays traced views
    and library steps on its results, and a view traced on a transposed result (attention's
    output after `q.transpose(1, 2) * 2`, say) does not apply to a contiguous one. Results traced
    with other strides (those, and inputs passed through in other strides) are copied into the
    traced strides; otherwise a call costs a stride check per result."""
    (out_node,) = [n for n in sub.graph.nodes if n.op == "output"]
    outs = out_node.args[0]
    single = not isinstance(outs, (list, tuple))
    vals = [o.meta.get("val") if isinstance(o, torch.fx.Node) else None for o in ([outs] if single else outs)]
    traced = [(i, tuple(v.stride())) for i, v in enumerate(vals)
              if isinstance(v, torch.Tensor) and all(isinstance(s, int) for s in v.stride())]

    def run(*args):
        res = fn(*args)
        items = [res] if single else list(res)
        for i, strides in traced:
            t = items[i]
            if isinstance(t, torch.Tensor) and not _same_layout(t, strides):
                items[i] = torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device).copy_(t)
        return items[0] if single else type(res)(items)

    return run


def compile_graph(gm: torch.fx.GraphModule, name: str, rec: CompileRecord, fallback=None, depth: int = 0):
    """The graph as one executable, or as lowered pieces with library steps between them."""
    from .partition import partition

    tr = _translate(gm, None, rec)
    if not tr.untranslatable:
        return _whole(gm, name, rec, tr)
    if depth > 2:
        raise CompileError(f"ember compiler: could not split graph {name} into lowerable pieces "
                           f"({', '.join(op for op, _, _ in tr.untranslatable)})")
    split, pieces, steps = partition(gm)
    if depth == 0:
        _check_steps(steps, rec, fallback, name)
    else:  # a piece split again: its steps join the graph's own
        before = (list(rec.library_ops), list(rec.eager_ops))
        _check_steps(steps, rec, fallback, name)
        rec.library_ops, rec.eager_ops = before[0] + rec.library_ops, before[1] + rec.eager_ops
    if split is None:  # everything translated: no Python between pieces
        whole = _whole(gm, name, rec, tr)
        return watched(whole, rec) if depth == 0 else whole
    for i, sub_name in enumerate(pieces):
        sub = getattr(split, sub_name)
        piece_name = f"{name}_p{i}"
        # A piece is compiled like a graph of its own: a node that a constant made lowerable in the
        # whole graph (folded there) may have become a piece input, and is split out again.
        fn = _in_traced_strides(compile_graph(sub, piece_name, rec, fallback, depth + 1), sub)
        delattr(split, sub_name)
        setattr(split, sub_name, fn)
    return watched(split, rec) if depth == 0 else split
