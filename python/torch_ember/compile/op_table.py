"""One table per ATen op: which eager kernel serves it and which compiler route.

Eager (what the dispatcher has for PrivateUse1):
  native     an ember kernel registered for the op (csrc/torch/aten/register_<family>.cc)
  composite  PyTorch's CompositeExplicitAutograd kernel, which calls other ops (each native or not)
  decomposed PyTorch's decomposition of the op, run by an ember kernel (eager_decompositions.py)
  fallback   nothing: the op runs on the CPU through the visible fallback
Compiled (what a graph node with this op becomes):
  fused      a lowering to Ember IR (lowering.py, lowering_nn.py): generated loops or a library
             kernel the plan calls (GEMM, attention)
  decompose  AOTAutograd rewrites it into other ops first (decompositions.py)
  library    no lowering, but an eager kernel: the graph runs the op as a step between its
             compiled pieces, on the same stream, in order
  none       neither: a strict compile fails naming the op and its line

The design rule this table enforces: an op whose eager route is native, composite or
decomposed never fails a compile (its compile route is at worst "library"). The compiler asks
`compile_route` when it meets an op it cannot lower, and the coverage docs are generated from
`rows()`, so the two cannot disagree."""
import functools
import os
import re

import torch

_PRIVATEUSE1 = "PrivateUse1"


def _qualified(target) -> str | None:
    if isinstance(target, torch._ops.OpOverload):
        return target.name()
    return None


@functools.lru_cache(maxsize=1)
def _structured_delegates() -> dict:
    """"lgamma" -> "lgamma.out": the ops whose functional form is generated from an out= kernel,
    read from the native_functions.yaml that ships with torch (torchgen/packaged)."""
    import torchgen

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    out, name = {}, None
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("- func: "):
                    name = line[len("- func: "):].split("(", 1)[0].strip()
                elif name and line.strip().startswith("structured_delegate:"):
                    out[name] = line.split(":", 1)[1].strip()
    except OSError:
        pass
    return out


@functools.lru_cache(maxsize=None)
def _eager_route_of(name: str) -> str:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(name, _PRIVATEUSE1):
        return "native"
    if has(name, "CompositeExplicitAutogradNonFunctional"):
        # A structured op's functional form allocates the output and calls its out= form, so it
        # is as native as that; other NonFunctional kernels compose other ops.
        delegate = _structured_delegates().get(name.removeprefix("aten::"))
        if delegate is not None:
            return _eager_route_of("aten::" + delegate)
        return "composite"
    if has(name, "CompositeExplicitAutograd") or has(name, "CompositeImplicitAutograd"):
        return "composite"
    return "fallback"


def eager_route(target) -> str:
    name = _qualified(target)
    if not name:
        return "fallback"
    from .. import eager_decompositions

    short = name.split("::")[-1]
    if (short if "." in short else short + ".default") in eager_decompositions.registered:
        return "decomposed"
    return _eager_route_of(name)


# Higher-order ops whose device-generic implementation runs on ember tensors (FlexAttention's
# math reference, forward and backward; control flow, whose branches and bodies are subgraphs of
# ember ops; user-defined Triton kernels, which Dynamo and triton_op custom ops put in a graph as
# triton_kernel_wrapper_* nodes and whose eager implementation launches the kernel through
# Ember's Triton backend; the RNG-state wrappers AOTAutograd puts around random ops in a
# checkpointed region, which integrations/_rng_prims.py gives ember implementations; the
# with_effects wrapper AOTAutograd puts around ops with side effects, such as linalg's
# _linalg_check_errors, which calls the op and threads an ordering token through; out_dtype, the
# int8 x int8 -> int32 product of torchao's dynamic quantization): they are
# library steps of a compiled graph, as in eager mode.
EAGER_HIGHER_ORDER = frozenset({"flex_attention", "flex_attention_backward", "cond", "while_loop", "invoke_subgraph",
                                "map_impl", "scan", "triton_kernel_wrapper_mutation",
                                "triton_kernel_wrapper_functional", "run_and_save_rng_state",
                                "run_with_rng_state", "with_effects", "auto_functionalized", "auto_functionalized_v2",
                                "out_dtype"})


def runs_eagerly_on_ember(target) -> bool:
    """True when eager mode serves the op without sending it to the CPU fallback itself."""
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name() in EAGER_HIGHER_ORDER
    return eager_route(target) in ("native", "composite", "decomposed")


def compile_route(target) -> str:
    from .decompositions import decomposition_table
    from .lowering import LOWERINGS

    if target in LOWERINGS:
        return "fused"
    if target in decomposition_table():
        return "decompose"
    return "library" if runs_eagerly_on_ember(target) else "none"


# --- the generated table -------------------------------------------------------------------------
_IMPL = re.compile(r'm\.impl\("([^"]+)"')


@functools.lru_cache(maxsize=1)
def _registration_files() -> dict:
    """ATen overload name ("add.Tensor") -> register_<family>.cc that registers it, read from the
    source tree when it is there (an installed wheel has no sources; the column is then empty)."""
    here = os.path.dirname(os.path.abspath(__file__))
    aten_dir = os.path.join(here, "..", "..", "..", "csrc", "torch", "aten")
    out = {}
    if not os.path.isdir(aten_dir):
        return out
    for f in sorted(os.listdir(aten_dir)):
        if f.startswith("register_") and f.endswith(".cc"):
            with open(os.path.join(aten_dir, f)) as fh:
                for name in _IMPL.findall(fh.read()):
                    out.setdefault(name if "." in name else name + ".default", f)
    return out


def _overload_of(name: str):
    ns, rest = name.split("::")
    base, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base, None)
    return getattr(packet, overload or "default", None) if packet is not None else None


def rows() -> list:
    """[(op, eager route, registration file, compile route)] for every ATen op that ember
    registers, lowers or decomposes, sorted by name."""
    from .decompositions import FOLDED_WHOLE, KEPT_WHOLE, decomposition_table
    from .lowering import LOWERINGS

    targets = {t for t in LOWERINGS if isinstance(t, torch._ops.OpOverload)}
    targets |= {t for t in decomposition_table() if isinstance(t, torch._ops.OpOverload)}
    targets |= set(KEPT_WHOLE) | set(FOLDED_WHOLE)
    from .. import eager_decompositions

    for name in [*_registration_files(), *eager_decompositions.registered]:
        op = _overload_of("aten::" + name)
        if op is not None:
            targets.add(op)
    files = _registration_files()
    out = []
    for t in targets:
        short = t.name().split("::")[-1]
        short = short if "." in short else short + ".default"
        out.append((f"aten.{short}", eager_route(t), files.get(short, ""), compile_route(t)))
    return sorted(out)
