"""Warm start: a new process that runs an already-compiled model skips Dynamo's bytecode
tracing and AOTAutograd's retrace (EMBER_PRECOMPILE=1).

How: the forward, backward and inference graphs the "ember" backend compiles are returned to
AOTAutograd as `EmberOutputCode`, an OutputCode that pickles. What it stores is not the FX graph
but what rebuilds the callable from Ember's own on-disk kernel cache: the executable's cache
key, the calls that built its IR graph (replayed, they give the same graph, hence the same key;
on a kernel-cache miss they compile it again) and the call metadata (input order and strides,
outputs, views replayed on outputs). With torch._dynamo.config.caching_precompile on, PyTorch
bundles these with AOTAutograd's runtime metadata and Dynamo's guards and bytecode into one
package per compiled function under TORCHINDUCTOR_CACHE_DIR/dynamo; the next process loads it at
torch.compile() time and, if the guards pass, runs it without tracing anything.

Guards against reusing a wrong artifact:
  - every artifact carries a salt: Ember's version, a hash of the compiler's Python sources and
    of the built extension, the torch version and the backend options/mode; a package is loaded
    for backend="ember" only if all its artifacts are Ember's with the salt of the requesting
    torch.compile call, and never for another backend;
  - AOTAutograd's own cache key is salted with the same value (torch.compiler.config.cache_key_tag);
  - Dynamo's guards (tensor sizes, dtypes, strides, global state) and source checksums of the
    traced code decide as usual; a guard miss recompiles;
  - each payload has a SHA-256 checked before use; a corrupt package or payload is discarded and
    the function compiles from scratch; a corrupt kernel-cache entry is detected by the C++ cache
    and recompiled from the stored IR.

Limits: graphs that Ember splits into pieces with library steps between them, data-dependent
graphs and dynamic=True graphs (specialized per input sizes at run time) are not serializable:
their function is compiled as before on every start. caching_precompile is a process-wide
PyTorch setting: with EMBER_PRECOMPILE=1 it applies to every torch.compile call (its guard
filter drops identity guards, as PyTorch documents), which is why it is opt-in."""
import dataclasses
import functools
import hashlib
import logging
import os
import pickle
import sys
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("torch_ember.compile")

ENV = "EMBER_PRECOMPILE"


def enabled() -> bool:
    return os.environ.get(ENV, "0") == "1"


@functools.cache
def _code_fingerprint() -> str:
    """Ember's version, the compiler's Python sources and the built extension."""
    from .. import _C
    from .. import __version__

    h = hashlib.sha256(f"{__version__}|torch {torch.__version__}".encode())
    for p in sorted(Path(__file__).parent.glob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    so = Path(_C.__file__)
    st = so.stat()
    h.update(f"{so.name}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:32]


def salt(options: dict, mode=None) -> str:
    # `background` changes when a graph compiles, not what it compiles to.
    options = {k: v for k, v in options.items() if k != "background"}
    h = hashlib.sha256(_code_fingerprint().encode())
    h.update(repr((sorted(options.items()), mode)).encode())
    return "ember-" + h.hexdigest()[:24]


def _digest(state) -> tuple[bytes, str]:
    blob = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    return blob, hashlib.sha256(blob).hexdigest()


def _output_code_base():
    from torch._inductor.output_code import OutputCode
    return OutputCode


class _NotSerializable(Exception):
    pass


def _make_output_code_class():
    OutputCode = _output_code_base()

    @dataclasses.dataclass
    class EmberOutputCode(OutputCode):
        """A compiled ember graph as AOTAutograd's cache stores it (boxed call)."""

        fn: Any = None  # the live callable; not serialized
        kind: str = ""
        name: str = ""
        salt: str = ""
        blob: bytes | None = None  # pickled CompiledGraph.cache_state()
        digest: str = ""

        def __post_init__(self):
            self._boxed_call = True

        def __call__(self, inputs):
            if _pending:
                _save_pending()
            out = self.fn(*inputs)
            inputs.clear()
            return out

        def prepare_for_serialization(self) -> None:
            from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

            from .runner import CompiledGraph

            if self.fn is not None:
                if not isinstance(self.fn, CompiledGraph):
                    raise BypassAOTAutogradCache(f"ember graph {self.name} is not serializable "
                                                 "(library steps between compiled pieces, or data-dependent)")
                self.blob, self.digest = _digest(self.fn.cache_state())
            self.fn = None

        def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
            if self.fn is not None:
                return
            self.fn = rebuild(self)

        def set_triton_bundle(self, triton_bundle) -> None:
            pass

    EmberOutputCode.__module__ = __name__
    EmberOutputCode.__qualname__ = "EmberOutputCode"
    return EmberOutputCode


def __getattr__(name):  # EmberOutputCode is built on first use: OutputCode imports Inductor parts
    if name == "EmberOutputCode":
        cls = globals().get("_EmberOutputCode")
        if cls is None:
            cls = globals()["_EmberOutputCode"] = _make_output_code_class()
        return cls
    raise AttributeError(name)


def rebuild(code):
    """The live callable of a loaded EmberOutputCode, after checking it."""
    import time

    from . import stats as _stats
    from .runner import CompiledGraph

    if code.blob is None or hashlib.sha256(code.blob).hexdigest() != code.digest:
        raise RuntimeError(f"ember warm start: stored graph {code.name} is corrupt (checksum mismatch)")
    try:
        state = pickle.loads(code.blob)
    except Exception as e:
        raise RuntimeError(f"ember warm start: stored graph {code.name} does not load: {e}") from None
    t0 = time.perf_counter()
    rec = _stats.CompileRecord(name=code.name, kind=code.kind, recompile_reason="warm start: loaded")
    fn = CompiledGraph.from_cache_state(state, rec)
    rec.total_ms = (time.perf_counter() - t0) * 1e3
    _stats.record(rec)
    return fn


def wrap(fn, kind: str, name: str, salt_: str):
    return __getattr__("EmberOutputCode")(fn=fn, kind=kind, name=name, salt=salt_)


def serializable_compiler(compile_fx):
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    return SerializableAOTDispatchCompiler(__getattr__("EmberOutputCode"), compile_fx)


# --- package loading and saving ---------------------------------------------------------------

def _requested_backend():
    """(is_ember, salt) of the torch.compile call that is loading a package, from the frame of
    Dynamo's _optimize_catch_errors.__call__; (None, None) when it cannot be told."""
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            break
        me = f.f_locals.get("self")
        cb = getattr(me, "callback", None)
        if cb is not None:
            b, seen = cb, 0
            while b is not None and seen < 12:
                seen += 1
                fn = getattr(b, "compiler_fn", None)
                if fn is not None and getattr(fn, "__name__", "") == "ember_backend":
                    kw = dict(getattr(b, "kwargs", {}) or {})
                    return True, salt(dict(kw.get("options") or {}), kw.get("mode"))
                if getattr(b, "__name__", "") == "ember_backend":
                    return True, salt({}, None)
                b = getattr(b, "_torchdynamo_orig_backend", None) or getattr(b, "compiler_fn", None)
            return False, None
        f = f.f_back
    return None, None


def _ember_codes(entry):
    """The EmberOutputCode objects of a PrecompileCacheEntry's backends, and whether any backend
    holds something else."""
    codes, other = [], False
    for art in entry.backends.values():
        content = getattr(art, "content", None)
        found = False
        for part in ("compiled_fw", "compiled_bw"):
            res = getattr(getattr(content, part, None), "result", None)
            if res is not None and type(res).__name__ == "EmberOutputCode":
                codes.append(res)
                found = True
        other = other or not found
    return codes, other


def _checked_load(original):
    from torch._dynamo.utils import counters

    def load(fn):
        entry = original(fn)
        if entry is None:
            return None
        is_ember, want = _requested_backend()
        codes, other = _ember_codes(entry)
        ok = True
        if is_ember is None:
            ok = not codes  # cannot tell who asks: never hand out ember artifacts
        elif is_ember:
            ok = bool(codes) and not other and all(
                c.salt == want and c.blob is not None and hashlib.sha256(c.blob).hexdigest() == c.digest
                for c in codes)
        else:
            ok = not codes
        if not ok:
            counters["dynamo_cache"]["ember_rejected"] += 1
            log.info("ember warm start: ignoring a stored package for %s (other backend, config or corrupt)",
                     getattr(fn, "__qualname__", fn))
            return None
        _advance_unique_ids()
        counters["dynamo_cache"]["ember_loaded"] += 1
        return entry

    load._ember_checked = True
    return load


def _advance_unique_ids():
    """torch 2.13: names Dynamo generates (__builtins_dict___0, ...) come from a counter that
    restarts at 0 in a new process, so a recompile after a package load would reuse a name the
    loaded code already installed. Move the counter to a range of this process's own, drawn at
    random: a fixed offset would be the same in every process, and a later process that loads
    the packages of two earlier ones (each recompiled after a load) would meet it twice."""
    import itertools
    import secrets

    from torch._dynamo import bytecode_transformation as bt

    cur = next(bt._unique_id_counter)
    bt._unique_id_counter = itertools.count((1 << 40) + (secrets.randbits(36) << 4) + cur)


def save() -> int:
    """Writes the packages of every function compiled by backend="ember" in this process whose
    graphs all serialized; returns how many were written."""
    from torch._dynamo.package import DynamoCache, PrecompileCacheEntry
    from torch._dynamo.precompile_context import PrecompileContext

    arts = PrecompileContext._backend_artifacts_by_key
    written = 0
    for key, cache_entry in list(PrecompileContext._dynamo_cache_entries.items()):
        ids = [b for code in cache_entry.codes for b in code.backend_ids]
        if not ids or any(b not in arts for b in ids):
            continue
        try:
            entry = PrecompileCacheEntry.from_cache_entry(cache_entry, {b: arts[b] for b in ids})
            if entry is None:
                continue
            codes, other = _ember_codes(entry)
            if not codes or other:
                continue
            DynamoCache.write(entry, key)
            written += 1
        except Exception as e:  # a package that cannot be written only costs the next start
            log.info("ember warm start: could not save %s: %s", key, e)
    return written


_saved_at_exit = False


def note_compiled() -> None:
    """Called after each ember compile: packages are written at exit, and at the first run of a
    newly compiled graph (so that a process that is killed still leaves them)."""
    global _saved_at_exit, _pending
    _pending = 4
    if not _saved_at_exit:
        import atexit

        _saved_at_exit = True
        atexit.register(save)


_pending = 0  # tries left to save the packages of graphs compiled since the last save


def _save_pending() -> None:
    global _pending
    if _pending:
        _pending -= 1
        try:
            if save():
                _pending = 0
        except Exception as e:
            _pending = 0
            log.info("ember warm start: saving packages failed: %s", e)


def _quiet_dropped_guards(record: logging.LogRecord) -> bool:
    # One warning per identity guard that caching_precompile drops, on every compile: the
    # behaviour EMBER_PRECOMPILE documents, not news.
    return "is dropped with caching_precompile" not in str(record.msg)


def install() -> None:
    """Turns the warm-start route on (Dynamo is being imported or is loaded)."""
    import torch._dynamo.config as dconfig
    from torch._dynamo import package

    dconfig.caching_precompile = True
    logging.getLogger("torch._dynamo.guards").addFilter(_quiet_dropped_guards)
    if not getattr(package.DynamoCache.load, "_ember_checked", False):
        package.DynamoCache.load = _checked_load(package.DynamoCache.load)
