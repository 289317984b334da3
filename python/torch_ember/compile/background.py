"""Background compilation (options={"background": True}): no wait for the first steps.

The first call of a graph (or of each new input signature of a dynamic one) starts its compile on
a thread of its own and runs the graph as Dynamo captured it, op by op on Ember's eager kernels,
with autograd as in eager mode. Calls keep running eagerly until the compile is done; the next
call after that runs the compiled forward (and its compiled backward). Results are the eager
kernels' and then the compiled graph's, which agree as eager and compiled mode always do.

What the thread does is what a deferred compile does on the caller's thread (backend.py's
_specializing): AOTAutograd traces a copy of the graph over fake tensors made from the first
call's inputs, outside Dynamo's tracing context, with the backward compiled at once rather than
at its first use, then Ember lowers and JITs both (the C++ compile releases the GIL). The thread
runs under the caller's grad mode and autocast state, which decide what AOTAutograd traces.

FX tracing is process-wide state in PyTorch: while a trace runs, `nn.Module.__call__` is routed
through the tracer (which, for the tracer AOTAutograd uses, calls the module unchanged), a
patcher is installed and restored, and a module flag says "FX tracing", which makes Dynamo
refuse to run a compiled function. Two threads tracing at once (the compile thread, and the
caller running `cond` eagerly, which traces its branches) would restore each other's state.
So `install()` makes every FX trace in the process hold one lock, and makes the flag's reader
that Dynamo uses answer for the tracing thread only. Ember's compiles take the same lock, so a
foreground compile waits for a background one.

A compile that fails (an op with no ember kernel and no fallback allowed) raises its
CompileError at the next call, as a compile in the foreground would have at the first.
compile_stats() marks background graphs and counts the eager calls they replaced; the profiler
shows each eager call as `ember.eager_while_compiling <graph>` and the first compiled call as
`ember.compiled_takes_over <graph>`."""
import functools
import sys
import threading

import torch


class BackgroundCompile:
    """One input signature's compile, run on a thread; `fn` is set once it succeeded."""

    def __init__(self, name: str, build):
        self.name = name
        self.fn = None
        self.error = None
        self.eager_calls = 0
        self.records: list = []
        self.switched = False
        self._finished = False
        self._done = threading.Event()
        # Not a daemon: an interpreter that exits mid-compile waits for the JIT to finish
        # instead of tearing LLVM down under it.
        self._thread = threading.Thread(target=self._run, args=(build, _caller_state()),
                                        name=f"ember-compile-{name}")
        self._thread.start()

    def _run(self, build, state):
        from torch._functorch import config as functorch_config

        # (At the normal OS priority: at nice 10 or 19 the thread starved behind a busy eager
        # loop and had not finished after 40 steps of the demo model.)
        try:
            # The backward is compiled now, on this thread, not lazily at its first use on
            # the caller's thread.
            with state(), functorch_config.patch(force_non_lazy_backward_lowering=True):
                self.fn = build(self.records)
        except BaseException as e:  # noqa: B036 - handed to the caller's thread
            self.error = e
        finally:
            self._finished = True
            _finished()  # before ready(): whoever waited for it finds the interval restored
            self._done.set()

    def ready(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout=None) -> bool:
        return self._done.wait(timeout)

    def call(self, eager, compiled_args, eager_args):
        """Runs the compiled graph when ready, else `eager(*eager_args)`."""
        if not self._done.is_set():
            self.eager_calls += 1
            with _profiled(f"ember.eager_while_compiling {self.name}"):
                return eager(*eager_args)
        if self.error is not None:
            from .errors import CompileError

            err = self.error
            raise CompileError(f"the background compile of {self.name} failed after {self.eager_calls} "
                               f"eager calls: {err}") from err
        if not self.switched:
            self.switched = True
            for rec in self.records:
                rec.eager_calls = self.eager_calls
            with _profiled(f"ember.compiled_takes_over {self.name}"):
                return self.fn(*compiled_args)
        return self.fn(*compiled_args)


def _caller_state():
    """A context manager that sets, on another thread, the thread-local state of this one that
    changes what AOTAutograd traces: grad mode and autocast per device type."""
    import contextlib

    grad = torch.is_grad_enabled()
    casts = [(d, torch.get_autocast_dtype(d)) for d in ("cpu", "ember") if torch.is_autocast_enabled(d)]
    cache = torch.is_autocast_cache_enabled()

    @contextlib.contextmanager
    def state():
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.set_grad_enabled(grad))
            for d, dtype in casts:
                stack.enter_context(torch.autocast(d, dtype=dtype, cache_enabled=cache))
            yield

    return state


# Held by every FX trace, every Dynamo frame conversion and every Ember compile (AOTAutograd
# and lowering) in the process. One lock, not one per kind: a Dynamo conversion calls the
# backend, which compiles and traces, while a compile thread traces and compiles; two locks
# would be taken in opposite orders.
trace_lock = threading.RLock()
_flag_owner = None  # the thread inside the outermost FX trace, if any


def install() -> None:
    """Makes FX tracing safe beside a background compile (see the module doc). Called when
    Dynamo loads, before any torch.compile wrapper captures the flag's reader:
      - every FX trace (Tracer.trace, which make_fx and AOTAutograd use) and every Dynamo frame
        conversion holds trace_lock, so two threads never interleave their patching and
        restoring of process-wide state (Dynamo, tracing a new frame while a trace had
        `nn.Module.__call__` patched, would trace the patch and guard on it);
      - Dynamo's reader of the tracing flag answers False on a thread other than the one
        tracing, so a compiled function still runs there."""
    from torch._dynamo import convert_frame
    from torch.fx import _symbolic_trace as st

    if getattr(st.Tracer.trace, "_ember", False):
        return
    convert = convert_frame._compile

    def locked_convert(*args, **kwargs):
        with trace_lock:
            return convert(*args, **kwargs)

    convert_frame._compile = functools.wraps(convert)(locked_convert)
    trace = st.Tracer.trace

    def locked_trace(self, *args, **kwargs):
        global _flag_owner
        with trace_lock:
            outer = _flag_owner is None
            if outer:
                _flag_owner = threading.current_thread()
            try:
                return trace(self, *args, **kwargs)
            finally:
                if outer:
                    _flag_owner = None

    locked_trace._ember = True
    locked_trace.__doc__ = trace.__doc__
    st.Tracer.trace = locked_trace
    is_tracing = st.is_fx_symbolic_tracing

    def is_fx_symbolic_tracing() -> bool:
        owner = _flag_owner
        if owner is not None and owner is not threading.current_thread():
            return False
        return is_tracing()

    st.is_fx_symbolic_tracing = is_fx_symbolic_tracing


def _profiled(label: str):
    import contextlib

    if torch.autograd.profiler._is_profiler_enabled:
        return torch.profiler.record_function(label)
    return contextlib.nullcontext()


def pending() -> list:
    """Background compiles of this process not finished yet (for tests and benchmarks)."""
    with _lock:
        return [c for c in _all if not c.ready()]


def wait_all(timeout=None) -> bool:
    """Waits for every background compile started so far; False if one is still running."""
    return all(c.wait(timeout) for c in pending())


_lock = threading.Lock()
_all: list = []


# Python hands the GIL to a waiting thread only after the holder ran this long. The caller's
# eager steps release the GIL at every wait on the device and in backward; at the default 5 ms
# each reacquisition behind a tracing thread cost up to 5 ms (a 1 ms step took 50-250 ms).
_SWITCH_INTERVAL_S = 0.0002
_saved_interval = None


def start(name: str, build) -> BackgroundCompile:
    global _saved_interval
    with _lock:
        if _saved_interval is None:
            _saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(min(_saved_interval, _SWITCH_INTERVAL_S))
        c = BackgroundCompile(name, build)
        _all[:] = [x for x in _all if not x.ready()] + [c]
    return c


def _finished() -> None:
    global _saved_interval
    with _lock:
        if _saved_interval is not None and all(x._finished for x in _all):
            sys.setswitchinterval(_saved_interval)
            _saved_interval = None

