"""The "ember" torch.compile backend: Dynamo's graph -> AOTAutograd (core ATen, forward and
backward split, or one inference graph) -> Ember IR -> compiled executables.

Options (torch.compile(..., options={...}) arrives here as keyword arguments):
  fallback: None (default) fails the compile on an op that has no ember kernel at all (eager
            mode would run it on the CPU) with a CompileError that names each op and its source
            line; "eager" runs those through the CPU fallback too. Ops that have an eager ember
            kernel but no lowering always compile: they run as library steps.
  background: False (default, or EMBER_BACKGROUND_COMPILE=1 for True) compiles at the first
            call, which waits; True compiles on a thread while the first calls run eagerly
            (background.py).
Shapes are static. A graph that Dynamo hands over with symbolic sizes (its automatic dynamic
shapes after a recompile, or dynamic=True) is specialized: each combination of input sizes
seen at run time runs eagerly at its first call and is traced and compiled, for those sizes, at
its second, up to SPECIALIZATIONS of them; later combinations run the graph eagerly."""
import itertools
import operator
import threading
import time

import torch

from . import background as _background
from . import settings
from . import stats as _stats
from . import warm as _warm
from .compiler import compile_data_dependent, compile_graph
from .decompositions import decomposition_table
from .errors import CompileError
from .fx_to_ir import is_static
from .runner import boxed
from .source import node_source

_OPTIONS = {"fallback": (None, "eager"), "background": (False, True), "recompute": (False, True)}
# torch.compile(mode=...). Compiled graphs already run as one queued task per piece with no
# per-kernel host work, which is what reduce-overhead asks for. The max-autotune modes trade
# compile time for speed: they turn on "recompute" (AOTAutograd's min-cut partitioner, as
# Inductor uses, which has the backward recompute cheap elementwise values from the forward's
# inputs instead of saving them: RMSNorm forward + backward 6.5 -> 4.7 ms at 4096 x 1024, and
# less activation memory; about 15% more compile time on the demo model).
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_RECOMPUTE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
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


def _is_lifted_scalar(a) -> bool:
    # With dynamic shapes Dynamo passes Python floats (a LayerNorm's eps, a scale) as 0-d CPU
    # tensors that the graph reads back with .item(); AOTAutograd cannot trace that read.
    return isinstance(a, torch.Tensor) and a.dim() == 0 and a.device.type == "cpu"


def _bind_scalars(gm: torch.fx.GraphModule, args) -> torch.fx.GraphModule:
    """A copy of `gm` in which each .item() of a lifted-scalar input is replaced by the value
    (the placeholder stays, so the call signature is unchanged; the value is in the cache key)."""
    g = _copy_graph(gm)
    for n in g.graph.nodes:
        # Value-dependent sizes get new symbols when the copy is traced again (_traceable): the
        # ones Dynamo bound belong to its own shape environment.
        n.meta.pop("unbacked_bindings", None)
    placeholders = [n for n in g.graph.nodes if n.op == "placeholder"]
    _bind_into(g, {ph: a.item() for ph, a in zip(placeholders, args) if _is_lifted_scalar(a)})
    return g


def _copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of `gm`'s graph and modules that shares its tensors. Dynamo keeps some state as
    attributes of the graph module (a compiled optimizer step's parameters and moments): a
    copied tensor would be the one the compiled graph reads and updates in place, and the
    caller's would silently stay as it was."""
    import copy

    memo = {}
    for m in gm.modules():
        for v in (*m.__dict__.values(), *m._parameters.values(), *m._buffers.values()):
            if isinstance(v, torch.Tensor):
                memo[id(v)] = v
    return copy.deepcopy(gm, memo)


def _is_size_arg(a) -> bool:
    return isinstance(a, int) and not isinstance(a, bool)


def _without_size_args(g: torch.fx.GraphModule, args) -> torch.fx.GraphModule:
    """`g` with its int inputs (Dynamo's s0, a numel) replaced by their values and removed from
    the signature; the values are in the cache key. Passed to AOTAutograd they would be traced
    as symbols under _traceable's shape environment, and the graph would look value-dependent
    (every op a library step, nothing fused)."""
    placeholders = [n for n in g.graph.nodes if n.op == "placeholder"]
    for ph, a in zip(placeholders, args):
        if _is_size_arg(a):
            ph.replace_all_uses_with(a)
            g.graph.erase_node(ph)
    g.recompile()
    return g


def _bind_into(g: torch.fx.GraphModule, values: dict) -> None:
    """Replace .item() of the placeholders in `values`, here and in the subgraphs of the
    higher-order ops they are passed to (a checkpointed region's body reads a dropout p there)."""
    for ph, value in values.items():
        for user in list(ph.users):
            if user.op == "call_method" and user.target == "item":
                user.replace_all_uses_with(value)
                g.graph.erase_node(user)
            elif user.op == "call_function" and user.args and isinstance(user.args[0], torch.fx.Node) \
                    and user.args[0].op == "get_attr":
                body = getattr(g, user.args[0].target, None)
                operands = [a for a in user.args[1:] if isinstance(a, torch.fx.Node)]
                if not isinstance(body, torch.fx.GraphModule):
                    continue
                inner = [n for n in body.graph.nodes if n.op == "placeholder"]
                if len(inner) == len(operands):
                    _bind_into(body, {inner[k]: value for k, a in enumerate(operands) if a is ph})
    g.recompile()


# Input signatures one graph is specialized for. Past them, new signatures run Dynamo's graph
# eagerly (ember's eager kernels, op by op: eager speed, and exact for any sizes Dynamo's guards
# admit). An MoE expert's token count would otherwise compile a new executable at every step.
SPECIALIZATIONS = 8


def _specializing(gm, options):
    """A callable compiling `gm` once per concrete input signature, for the first
    SPECIALIZATIONS signatures. A signature's first call runs `gm` eagerly and its second one
    compiles it (with the background option: a thread compiles it from the first call on).
    Sizes that never come back, a decoding loop's growing KV cache or batches padded to their
    longest sequence, then cost no compile; the choice depends on the calls alone, not on timing,
    so a run's numerics are the same every time."""
    compiled, seen, eager = {}, set(), {}

    def eagerly(reason, *args):
        if reason not in eager:
            eager[reason] = _run_eagerly(gm, reason)
        return eager[reason](*args)

    def run(*args):
        key = tuple((tuple(a.shape), tuple(a.stride()), a.dtype, a.device,
                     a.item() if _is_lifted_scalar(a) else None) if isinstance(a, torch.Tensor) else a
                    for a in args)
        fn = compiled.get(key)
        if fn is None and len(compiled) >= SPECIALIZATIONS:
            return eagerly(f"more than {SPECIALIZATIONS} input signatures: new ones run eagerly", *args)
        if fn is None and key not in seen and not options.get("background"):
            seen.add(key)
            before = _fallback_calls()
            out = eagerly("new input sizes run eagerly until they come again", *args)
            if options.get("fallback") != "eager" and _fallback_calls() != before:
                # An op ran on the CPU fallback: it may have no ember kernel, which fails the
                # compile. Compiling now makes that error come at this call, as for a static
                # graph, instead of at the signature's next call after a step that worked.
                compiled[key] = _specialize(gm, args, options, _recompile_reason(compiled, key))
            return out
        if fn is None:
            reason = _recompile_reason(compiled, key)
            fn = compiled[key] = _specialize(gm, args, options, reason)
        return fn(*args)

    return run


def _fallback_calls() -> int:
    from .._fallback import fallback_report

    return fallback_report().total_calls


def _specialize(gm, args, options, reason):
    """The callable (taking every graph input) for the signature of `args`."""
    # Made here: a background thread must not read the caller's tensors while the caller
    # updates them in place, nor copy `gm` while the caller runs it.
    g = _without_size_args(_bind_scalars(gm, args), args)
    return _compiled_or_started(gm, g, _traceable(_tensor_args(args)), options, reason)


def _in_background(gm, options):
    """A static graph compiled on a thread from its first call on. Unlike _specializing, 0-d
    CPU inputs stay inputs (an optimizer's step count, updated in place): only symbolic
    graphs get Python floats lifted that way."""
    job = []

    def run(*args):
        if not job:
            job.append(_compiled_or_started(gm, _copy_graph(gm), _traceable(list(args)), options, ""))
        return job[0](*args)

    return run


def _compiled_or_started(gm, g, fakes, options, reason):
    """`g` compiled now, or on a thread while calls run `gm` eagerly (options["background"]);
    the result takes every input of `gm`."""
    gid = _next_id()

    def build(records=None):
        return _compile_static(g, fakes, options, reason, records=records, gid=gid)

    if not options.get("background"):
        fn = build()
        return lambda *a: fn(*_tensor_args(a))
    job = _background.start(f"graph{gid}", build)
    return lambda *a: job.call(gm, _tensor_args(a), a)


def _tensor_args(args) -> list:
    return [a for a in args if not _is_size_arg(a)]


def _traceable(args) -> list:
    """The concrete inputs as fake tensors of the same sizes under a shape environment, which
    AOTAutograd needs to trace ops whose result sizes depend on values (nonzero, a boolean mask,
    .item()); from real tensors it would trace without one and refuse them."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    return [mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a for a in args]


def _recompile_reason(compiled: dict, key: tuple) -> str:
    if not compiled:
        return ""
    prev = next(reversed(compiled))
    for i, (a, b) in enumerate(zip(prev, key)):
        if a != b:
            what = f"sizes {a[0]} -> {b[0]}" if isinstance(a, tuple) and a[0] != b[0] else f"{a} -> {b}"
            return f"input {i}: {what}"
    return "new input signature"


def _ember_devices(gm: torch.fx.GraphModule, example_inputs) -> list:
    """The ember devices the graph's inputs and values are on (none: a graph of CPU tensors)."""
    found = set()

    def visit(v):
        if isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, torch.Tensor) and v.device.type == "ember":
            found.add(str(v.device))

    visit(list(example_inputs))
    for n in gm.graph.nodes:
        visit(n.meta.get("example_value"))
    return sorted(found)


def _checkpoint_eagerly(body, *args, **kwargs):
    """tag_activation_checkpoint run in eager mode, with the random state preserved. PyTorch's
    own eager implementation turns preserve_rng_state off (a compile preserves it through
    AOTAutograd's functionalized random ops instead), so a dropout in the region drew a new
    mask in the recomputation and the gradient silently used the wrong one."""
    from torch.utils.checkpoint import checkpoint

    kwargs["preserve_rng_state"] = True
    if "_checkpoint_context_fn" in body.meta:
        kwargs.setdefault("context_fn", body.meta["_checkpoint_context_fn"])
    return checkpoint(body, *args, **kwargs)


def _eager_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` made right to run op by op; `gm` itself stays as Dynamo made it, for compiling."""
    hop = torch.ops.higher_order.tag_activation_checkpoint
    if not any(n.target is hop for m in gm.modules() if isinstance(m, torch.fx.GraphModule)
               for n in m.graph.nodes):
        return gm
    g = _copy_graph(gm)
    for m in g.modules():
        if isinstance(m, torch.fx.GraphModule):
            for n in m.graph.nodes:
                if n.target is hop:
                    n.target = _checkpoint_eagerly
            m.recompile()
    return g


def _run_eagerly(gm, reason: str):
    """`gm` run op by op on ember's eager kernels, counted in compile_stats() with the reason."""
    rec = _stats.CompileRecord(name=f"graph{_next_id()}_eager", kind="eager", recompile_reason=reason)
    _stats.record(rec)
    gm = _eager_graph(gm)

    def run(*args):
        rec.eager_calls += 1
        return gm(*args)

    return run


# In-place methods that change only metadata or autograd state.
_METADATA_IN_PLACE = {"requires_grad_", "retain_grad", "share_memory_", "resize_", "resize_as_", "set_", "detach_",
                      "as_strided_", "squeeze_", "unsqueeze_", "t_", "transpose_", "swapdims_", "swapaxes_"}
_AUGMENTED = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
              operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift}


def _overlapping_write(gm: torch.fx.GraphModule) -> str | None:
    """The first in-place op on a tensor whose elements share memory (an expand()ed view), as
    "op at file:line". AOTAutograd's functionalization replays such a write once per sharing
    element and sums: `a.expand(3, 4).masked_fill_(m, 7)` wrote 21 on every backend, and
    `.add_(1)`, which eager refuses, added 3. Such graphs run op by op, as eager does."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _AUGMENTED:
            name = node.target.__name__
        elif node.op in ("call_method", "call_function"):
            name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
            if not name.endswith("_") or name.startswith("_") or name in _METADATA_IN_PLACE:
                continue
        else:
            continue
        target = node.args[0] if node.args else None
        value = target.meta.get("example_value") if isinstance(target, torch.fx.Node) else None
        if isinstance(value, torch.Tensor) and torch._debug_has_internal_overlap(value) == 1:
            return f"{name} at {node_source(node)}"
    return None


def ember_backend(gm: torch.fx.GraphModule, example_inputs, **options):
    """torch.compile backend entry point (registered as "ember")."""
    devices = _ember_devices(gm, example_inputs)
    if not devices:
        # A model still on the CPU: compiling it for ember would move its results to the device
        # (and its gradients would then not match the CPU parameters). It runs as written; the
        # warning shows once per process under Python's default filter.
        import warnings

        warnings.warn("torch.compile(backend='ember') got a graph with only CPU tensors; it runs eagerly on "
                      "the CPU. Move the model and its inputs to 'ember' to compile it for the device.",
                      stacklevel=2)
        return gm.forward
    if len(devices) > 1:
        # A compiled graph runs on one device (its outputs and buffers are allocated there), so a
        # graph that moves tensors between devices (a model split across ember:0 and ember:1)
        # runs as written, op by op: placing it whole on one device put results on the wrong one.
        return _run_eagerly(gm, f"the graph spans {' and '.join(devices)}; compiled graphs run on one device")
    if (write := _overlapping_write(gm)) is not None:
        return _run_eagerly(gm, f"an in-place op writes a tensor whose elements share memory ({write})")
    # torch.compile(options=...) reaches a non-Inductor backend as one `options` keyword.
    mode = options.pop("mode", None)
    if mode is not None and mode not in MODES:
        raise CompileError(f"unknown torch.compile mode {mode!r} for backend='ember'; known: {list(MODES)}")
    options = _check_options({**(options.pop("options", None) or {}), **options})
    if mode in _RECOMPUTE_MODES:
        options.setdefault("recompute", True)
    # A graph that runs higher-order ops is compiled in the foreground: run eagerly it traces
    # (cond materializes its branches, checkpoint and flex attention build subgraphs), and
    # FX tracing state is process-wide, so it would race the compile thread (background.py).
    jagged = _has_jagged(example_inputs)  # (re-faked on a compile thread, nested sizes would be lost)
    background = options.get("background", settings.background_compile()) and not _has_higher_order_ops(gm) \
        and not jagged
    options = {**options, "background": background}
    if _is_symbolic(example_inputs) and not jagged:
        return _specializing(gm, options)
    if background:
        return _in_background(gm, options)
    if _warm.enabled():
        return _compile_serializable(gm, example_inputs, options, mode)
    return _compile_static(gm, example_inputs, options)


def _has_jagged(example_inputs) -> bool:
    # A jagged nested tensor's ragged size is a nested int, which belongs to the shape environment
    # Dynamo traced with: the graph is compiled from Dynamo's own inputs, symbolic (its ops then
    # run as library steps, compile_data_dependent), rather than specialized per size.
    from torch.nested._internal.nested_tensor import NestedTensor

    return any(isinstance(x, NestedTensor) for x in example_inputs)


def _has_higher_order_ops(gm: torch.fx.GraphModule) -> bool:
    return any(isinstance(n.target, torch._ops.HigherOrderOperator) for m in gm.modules()
               if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes)


def _compile_serializable(gm, example_inputs, options, mode):
    """_compile_static with artifacts that AOTAutograd's cache and Dynamo's precompile packages
    can store (warm.py), under a cache key salted with Ember's config."""
    salt = _warm.salt(options, mode)
    tag = torch.compiler.config.cache_key_tag
    with torch.compiler.config.patch(cache_key_tag=f"{tag}|{salt}" if tag else salt):
        out = _compile_static(gm, example_inputs, options, serializable=salt)
    _warm.note_compiled()
    return out


def _next_id() -> int:
    with _ids_lock:
        return next(_ids)


def _compile_static(gm, example_inputs, options, recompile_reason="", serializable=None, records=None,
                    gid=None):
    from torch._dynamo.backends.common import aot_autograd

    gid = _next_id() if gid is None else gid
    mark = [time.perf_counter()]  # end of the previous phase we measured

    def compiler(kind):
        def compile_fx(fx_gm: torch.fx.GraphModule, inputs):
            rec = _stats.CompileRecord(name=f"graph{gid}_{kind}", kind=kind, recompile_reason=recompile_reason,
                                       background=records is not None)
            if records is not None:
                records.append(rec)
            t0 = time.perf_counter()
            rec.capture_ms = (t0 - mark[0]) * 1e3
            if kind == "bw" and records is not None:
                # Traced on a thread while the caller ran eager backwards, the partitioner can
                # leave forward nodes in the backward graph (fx.traceback's state is
                # process-wide): dead, but a dropout among them would still draw random numbers.
                fx_gm.graph.eliminate_dead_code(is_impure_node=lambda n: n.is_impure(impure_random=False))
                fx_gm.recompile()
            # Inputs are concrete here (symbolic ones were specialized), so a symbolic size is
            # one that depends on values: nonzero's output length, say.
            compile_fn = compile_graph if is_static(fx_gm) else compile_data_dependent
            fn = compile_fn(fx_gm, rec.name, rec, options.get("fallback"))
            mark[0] = time.perf_counter()
            rec.total_ms = rec.capture_ms + (mark[0] - t0) * 1e3
            _stats.record(rec)
            if serializable:
                return _warm.wrap(fn, kind, rec.name, serializable)
            return boxed(fn)
        if serializable:
            return _warm.serializable_compiler(compile_fx)
        return compile_fx

    # Input mutations stay in the graph (a copy_ into the input, fx_to_ir.py): as an epilogue
    # after the compiled forward, a running-stat update inside a checkpointed region bumped the
    # version of a buffer the backward had saved, and the backward refused to run.
    extra = {}
    if options.get("recompute"):
        from torch._functorch.partitioners import min_cut_rematerialization_partition

        extra["partition_fn"] = min_cut_rematerialization_partition
    aot = aot_autograd(fw_compiler=compiler("fw"), bw_compiler=compiler("bw"),
                       inference_compiler=compiler("inference"), decompositions=decomposition_table(),
                       keep_inference_input_mutations=True, **extra)
    with _background.trace_lock:
        return aot(gm, example_inputs)
