"""One table per ATen op: which eager kernel serves it and which compiler route.

Eager (what the dispatcher has for PrivateUse1):
  native     an ember kernel registered for the op (csrc/torch/aten/register_<family>.cc)
  composite  PyTorch's CompositeExplicitAutograd kernel, which calls other ops (each native or not)
  fallback   nothing: the op runs on the CPU through the visible fallback
Compiled (what a graph node with this op becomes):
  fused      a lowering to Ember IR (lowering.py, lowering_nn.py): generated loops or a library
             kernel the plan calls (GEMM, attention)
  decompose  AOTAutograd rewrites it into other ops first (decompositions.py)
  library    no lowering, but an eager kernel: the graph runs the op as a step between its
             compiled pieces, on the same stream, in order
  none       neither: a strict compile fails naming the op and its line

The design rule this table enforces: an op whose eager route is native or composite never
fails a compile (its compile route is at worst "library"). The compiler asks `compile_route`
when it meets an op it cannot lower, and the coverage docs are generated from `rows()`, so
the two cannot disagree."""
import functools
import os
import re

import torch

_PRIVATEUSE1 = "PrivateUse1"


def _qualified(target) -> str | None:
    if isinstance(target, torch._ops.OpOverload):
        return target.name()
    return None


def _out_variant(name: str):
    """The out= overload a structured op's functional form calls ("lgamma" -> "lgamma.out")."""
    op = _overload_of(name)
    if op is None:
        return None
    args = [a.name for a in op._schema.arguments]
    packet = op.overloadpacket
    for overload in packet.overloads():
        cand = getattr(packet, overload)
        schema = cand._schema
        outs = [a for a in schema.arguments if a.is_out]
        if outs and [a.name for a in schema.arguments if not a.is_out] == args:
            return cand.name()
    return None


@functools.lru_cache(maxsize=None)
def _eager_route_of(name: str) -> str:
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if has(name, _PRIVATEUSE1):
        return "native"
    if has(name, "CompositeExplicitAutogradNonFunctional"):
        # A structured op: its functional form allocates the output and calls the out= form.
        out = _out_variant(name)
        if out is not None and out != name:
            route = _eager_route_of(out)
            return "composite" if route == "composite" else route
        return "composite"
    if has(name, "CompositeExplicitAutograd") or has(name, "CompositeImplicitAutograd"):
        return "composite"
    return "fallback"


def eager_route(target) -> str:
    name = _qualified(target)
    return _eager_route_of(name) if name else "fallback"


def runs_eagerly_on_ember(target) -> bool:
    """True when eager mode serves the op without sending it to the CPU fallback itself."""
    return eager_route(target) in ("native", "composite")


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
    from .decompositions import decomposition_table
    from .lowering import LOWERINGS

    targets = {t for t in LOWERINGS if isinstance(t, torch._ops.OpOverload)}
    targets |= {t for t in decomposition_table() if isinstance(t, torch._ops.OpOverload)}
    for name in _registration_files():
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
