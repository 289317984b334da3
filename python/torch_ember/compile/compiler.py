"""Compile one ATen FX graph (a forward, backward or inference graph from AOTAutograd) into a
callable: the whole graph through Ember (strict), or, with fallback="eager", its maximal
translatable partitions through Ember and the rest as eager ember kernels."""
import logging
import time
import warnings

import torch

from .. import _C
from . import settings
from .errors import CompileError
from .fx_to_ir import translate
from .runner import CompiledGraph
from .stats import CompileRecord

log = logging.getLogger("torch_ember.compile")


def _device_of(gm) -> torch.device:
    for node in gm.graph.nodes:
        v = node.meta.get("val")
        for t in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(t, torch.Tensor) and t.device.type == "ember":
                return t.device
    return torch.device("ember", torch.ember.current_device())


def _build(gm, name, strides, rec: CompileRecord | None, strict_hint: str):
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    t0 = time.perf_counter()
    with unset_fake_temporarily():  # constants built while lowering must be real tensors
        tr = translate(gm, strides)
    fx_ms = (time.perf_counter() - t0) * 1e3
    if rec is not None:
        rec.fx_to_ir_ms += fx_ms
        rec.fx_nodes += tr.fx_nodes
    if tr.num_exe_outputs == 0 and not tr.untranslatable:
        return tr, None  # nothing to compute: only inputs and views of them
    cache = settings.cache_dir()
    try:
        exe, stats = _C._compile(tr.builder.g, name, cache, bool(cache))
    except NotImplementedError as e:
        msg = str(e).removeprefix("ember: not supported: ")
        raise CompileError(f"{msg}. {strict_hint}") from None
    if stats["warning"]:
        warnings.warn(f"ember compile cache: {stats['warning']}", RuntimeWarning, stacklevel=2)
    if rec is not None:
        rec.add_compile(stats)
    return tr, exe


_HINT = ('Run them eagerly instead with torch.compile(..., backend="ember", '
         'options={"fallback": "eager"}).')


def compile_strict(gm: torch.fx.GraphModule, name: str, rec: CompileRecord) -> CompiledGraph:
    tr, exe = _build(gm, name, None, rec, _HINT)
    return CompiledGraph(tr, exe, _device_of(gm),
                         lambda strides: _build(gm, name, strides, None, _HINT))


def compile_with_fallback(gm: torch.fx.GraphModule, name: str, rec: CompileRecord):
    from .partition import partition

    split, pieces, eager_nodes = partition(gm)
    rec.eager_ops = eager_nodes
    if eager_nodes:
        log.info("ember %s: %d op(s) run eagerly: %s", name, len(eager_nodes),
                 ", ".join(f"{op} at {src or '?'}" for op, src in eager_nodes))
        from . import fallback_count
        fallback_count.note(eager_nodes)
    if split is None:  # everything translated: no Python between pieces
        return compile_strict(gm, name, rec)
    for i, sub_name in enumerate(pieces):
        sub = getattr(split, sub_name)
        piece_name = f"{name}_p{i}"
        fn = compile_strict(sub, piece_name, rec)
        delattr(split, sub_name)
        setattr(split, sub_name, fn)
    return split
