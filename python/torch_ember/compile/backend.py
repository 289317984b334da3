"""The "ember" torch.compile backend: Dynamo's graph -> AOTAutograd (core ATen, forward and
backward split, or one inference graph) -> Ember IR -> compiled executables.

Options (torch.compile(..., options={...}) arrives here as keyword arguments):
  fallback: None (default) fails the compile on an op that has no ember kernel at all (eager
            mode would run it on the CPU) with a CompileError that names each op and its source
            line; "eager" runs those through the CPU fallback too. Ops that have an eager ember
            kernel but no lowering always compile: they run as library steps.
Shapes are static. A graph that Dynamo hands over with symbolic sizes (its automatic dynamic
shapes after a recompile, or dynamic=True) is specialized: each new combination of input sizes
seen at run time is traced and compiled once, for those sizes, on its first call."""
import itertools
import threading
import time

import torch

from . import stats as _stats
from .compiler import compile_graph
from .decompositions import decomposition_table
from .errors import CompileError
from .fx_to_ir import check_static
from .runner import boxed

_OPTIONS = {"fallback": (None, "eager")}
_ids = itertools.count()
_ids_lock = threading.Lock()


def _check_options(options: dict) -> dict:
    for k, v in options.items():
        if k not in _OPTIONS:
            raise CompileError(f"unknown ember compile option {k!r}; known: {sorted(_OPTIONS)}")
        if v not in _OPTIONS[k]:
            raise CompileError(f"ember compile option {k}={v!r}; expected one of {_OPTIONS[k]}")
    return options


def _is_symbolic(example_inputs) -> bool:
    for x in example_inputs:
        if isinstance(x, torch.SymInt):
            return True
        if isinstance(x, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride())):
            return True
    return False


def _specializing(gm, options):
    """A callable compiling `gm` once per concrete input signature, at its first call."""
    compiled = {}

    def run(*args):
        key = tuple((tuple(a.shape), tuple(a.stride()), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
                    for a in args)
        fn = compiled.get(key)
        if fn is None:
            fn = compiled[key] = _compile_static(gm, list(args), options)
        return fn(*args)

    return run


def ember_backend(gm: torch.fx.GraphModule, example_inputs, **options):
    """torch.compile backend entry point (registered as "ember")."""
    # torch.compile(options=...) reaches a non-Inductor backend as one `options` keyword.
    options = _check_options({**(options.pop("options", None) or {}), **options})
    if _is_symbolic(example_inputs):
        return _specializing(gm, options)
    return _compile_static(gm, example_inputs, options)


def _compile_static(gm, example_inputs, options):
    from torch._dynamo.backends.common import aot_autograd

    with _ids_lock:
        gid = next(_ids)
    mark = [time.perf_counter()]  # end of the previous phase we measured

    def compiler(kind):
        def compile_fx(fx_gm: torch.fx.GraphModule, inputs):
            rec = _stats.CompileRecord(name=f"graph{gid}_{kind}", kind=kind)
            t0 = time.perf_counter()
            rec.capture_ms = (t0 - mark[0]) * 1e3
            check_static(fx_gm)
            fn = compile_graph(fx_gm, rec.name, rec, options.get("fallback"))
            mark[0] = time.perf_counter()
            rec.total_ms = rec.capture_ms + (mark[0] - t0) * 1e3
            _stats.record(rec)
            return boxed(fn)
        return compile_fx

    aot = aot_autograd(fw_compiler=compiler("fw"), bw_compiler=compiler("bw"),
                       inference_compiler=compiler("inference"), decompositions=decomposition_table())
    return aot(gm, example_inputs)
