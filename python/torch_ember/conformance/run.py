"""OpInfo conformance: every op in PyTorch's `op_db`, run on ember and compared with the CPU.

For each OpInfo and dtype (default float32, bfloat16, int64, bool; only those the op supports on
the CPU) up to --max-samples sample inputs run once on the CPU and once with every tensor copied to
ember. Outputs must match (`torch.testing.assert_close`, equal_nan, exact dtypes and exact integer
results; float tolerances are assert_close's, a little looser for float32/bf16/fp16, widened by
the OpInfo's own cross-device overrides); when the CPU raises, ember must raise too. Outputs that
draw random numbers are compared by shape and dtype only. For float32 and float64 (what gradcheck
uses) the gradients of the sum of all floating outputs are compared too. Each (op, dtype),
forward and backward, is classified:

  native-pass    matched, and nothing fell back to the CPU
  fallback-pass  matched, but some aten ops ran on the CPU fallback (listed)
  fail           wrong values or an unexpected error (message, failing sample, fallen-back ops)
  skipped        with a reason: dtype unsupported, random output, time budget, ...

A failure whose failing sample had no fallback at all points at an ember kernel: those are
listed first in the summary, after any op that crashed or hung the process (from the command
line the checks run in a child process, restarted after a crash: a crash costs one op, not the
run).

Two more runs use the same classes (modules.py, properties.py say exactly what they check):

  --modules     PyTorch's module_db (nn layers, losses, norms; default float32) as test_modules.py
                builds them, in training mode: one module built on the CPU and a deep copy moved
                to ember, forward (outputs, buffers, inputs afterwards) and backward (gradients
                of every parameter and floating input) compared. Lazy modules take the CPU's
                parameters once initialised; random forwards are compared by shape only.
  --properties  the op properties test_ops.py checks (default float32, int64, bool), one class
                each: out (out= semantics: values, kept layout, resizing and its warning, dtype
                errors, a CPU out= refused), noncontiguous (samples made noncontiguous on ember),
                variants (method, in-place, operator, aliases against the CPU's and against the
                function), bool_bytes (bool tensors holding bytes 2..255). A property PyTorch's
                OpInfo expects to fail on the CPU or CUDA is skipped.

  python -m torch_ember.cli conformance --ops add,mm --dtypes float32      # a few ops
  python -m torch_ember.cli conformance --budget 1200 \\
      --json /tmp/conformance.json --markdown /tmp/conformance.md           # the full op_db
  python -m torch_ember.cli conformance --compiled --max-samples 2          # through torch.compile
  python -m torch_ember.cli conformance --modules                           # all of module_db
  python -m torch_ember.cli conformance --modules nn.Linear,nn.LSTM --dtypes float32,float64
  python -m torch_ember.cli conformance --properties --max-samples 4        # every property
  python -m torch_ember.cli conformance --properties out,variants --ops add,mul

The full op_db run takes a few minutes on two cores, --modules under a minute, --properties
about two minutes at --max-samples 4. `python -m torch_ember.conformance` and the
`ember conformance` script take the same options; from Python, `run.run(...)` returns the dict.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from typing import Callable, NamedTuple

import torch

import torch_ember

from . import check, report
# Re-exported: callers (tests, isolate.py) address op_db through this module.
from .opdb import (RANDOM_OPS, SKIP_OPS, dtype_name, full_name, load_op_db,  # noqa: F401
                   parse_dtype, select_ops, skip_before_running, skip_reason)
from .samples import run_samples, skipped, skipped_row

DEFAULT_DTYPES = ("float32", "bfloat16", "int64", "bool")
# module_db's modules are floating only; the properties need bool for the bool-bytes check.
DEFAULT_MODULE_DTYPES = ("float32",)
DEFAULT_PROPERTY_DTYPES = ("float32", "int64", "bool")
DEFAULT_MAX_SAMPLES = 8
DEFAULT_OP_TIME_LIMIT = 5.0


def op_passes(dtype, opts) -> tuple:
    """An op row has a forward, and a backward for float32 unless gradients are off."""
    return ("forward", "backward") if opts.get("backward", True) and dtype == torch.float32 \
        else ("forward",)


def check_op_dtype(op, dtype, *, max_samples, op_time_limit, end, backward=True, trace=None,
                   compiled: bool = False, **_) -> dict:
    """One result row: forward (and, for float32 with autograd, backward) of `op` at `dtype`.
    `trace(pass, index, summary, result)` runs before each sample and, with the result, after
    each pass: isolate.py reports crashes with it. `compiled` runs ember's side through
    torch.compile(backend="ember", fullgraph=True) and classifies with compiled.CLASSES."""
    check.set_compiled(compiled)
    try:
        row = _check_op_dtype(op, dtype, max_samples=max_samples, op_time_limit=op_time_limit, end=end,
                              backward=backward, trace=trace)
    finally:
        check.set_compiled(False)
    if compiled:
        from .compiled import classify
        row = {k: classify(v) if k in ("forward", "backward") else v for k, v in row.items()}
    return row


def _check_op_dtype(op, dtype, *, max_samples, op_time_limit, end, backward, trace=None) -> dict:
    trace = trace or (lambda kind, index, summary, result=None: None)
    want_backward = backward and dtype in (torch.float32, torch.float64)
    skip = skip_before_running(op, dtype, end)
    if skip:
        return skipped_row(full_name(op), dtype, skip, op_passes(dtype, {"backward": backward}))

    rec = {"op": full_name(op), "dtype": dtype_name(dtype)}
    overrides = check.tolerances(op, dtype)
    random = op.name in RANDOM_OPS
    deadline = min(time.monotonic() + op_time_limit, end)
    rec["forward"] = run_samples(
        lambda: op.sample_inputs("cpu", dtype, requires_grad=False),
        lambda s: check.check_forward(op, s, overrides, shape_only=random),
        max_samples, deadline, lambda i, s: trace("forward", i, s))
    trace("forward", None, None, rec["forward"])
    if not want_backward:
        return rec
    if not op.supports_autograd:
        rec["backward"] = skipped("no autograd support")
    elif random:
        rec["backward"] = skipped("random output")
    elif dtype not in op.supported_backward_dtypes("cpu"):
        rec["backward"] = skipped("dtype unsupported for backward")
    elif time.monotonic() >= end:
        rec["backward"] = skipped("time budget")
    else:
        deadline = min(time.monotonic() + op_time_limit, end)
        rec["backward"] = run_samples(
            lambda: op.sample_inputs("cpu", dtype, requires_grad=True),
            lambda s: check.check_backward(op, s, overrides),
            max_samples, deadline, lambda i, s: trace("backward", i, s))
    return rec


class Suite(NamedTuple):
    """What a run walks: the database, how an entry is named and selected, the check that turns
    (entry, dtype) into a row, and the passes (result columns) a row at a dtype has."""
    name: str
    load: Callable
    item_name: Callable
    select: Callable
    check: Callable
    passes: Callable
    default_dtypes: tuple


SUITES = ("ops", "modules", "properties")


def suite(name: str) -> Suite:
    """The suite by name; modules and properties load only when chosen."""
    if name == "modules":
        from . import modules as M
        return Suite(name, M.load_module_db, M.module_name, M.select_modules, M.check_module_dtype,
                     M.passes, DEFAULT_MODULE_DTYPES)
    if name == "properties":
        from . import properties as P
        return Suite(name, load_op_db, full_name, select_ops, P.check_properties, P.passes,
                     DEFAULT_PROPERTY_DTYPES)
    if name != "ops":
        raise ValueError(f"unknown suite {name!r}")
    return Suite(name, load_op_db, full_name, select_ops, check_op_dtype, op_passes, DEFAULT_DTYPES)


class _Progress:
    """A rich progress bar on a terminal; otherwise one plain line per op on stderr."""

    def __init__(self, total: int, per_op: int, enabled: bool):
        self.total, self.per_op, self.enabled = total, per_op, enabled
        self.done, self.pending, self.bar = 0, [], None
        if enabled and sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                           TimeElapsedColumn)
            except ImportError:
                return
            self.bar = Progress(TextColumn("{task.description:<44}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True))
            self.task = self.bar.add_task("conformance", total=total)

    def __enter__(self):
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()

    def add(self, row: dict):
        """One (op, dtype) row is done; an op's rows arrive together, one per dtype."""
        self.done += 1
        self.pending.append(row)
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done, description=row["op"][:44])
        if len(self.pending) < self.per_op:
            return
        if self.bar is None and self.enabled:
            rows = self.pending
            parts = [f"{r['dtype']}={r['forward']['status']}" for r in rows if "forward" in r]
            parts += [f"backward={r['backward']['status']}" for r in rows if "backward" in r]
            parts += [f"{r['dtype']} {k}={v['status']}" for r in rows for k, v in r.items()
                      if k not in ("op", "dtype", "forward", "backward") and isinstance(v, dict)]
            print(f"[{self.done}/{self.total}] {row['op']}: {' '.join(parts)}", file=sys.stderr,
                  flush=True)
        self.pending = []


def run(ops=None, dtypes=None, budget: float | None = None,
        max_samples: int = DEFAULT_MAX_SAMPLES, op_time_limit: float = DEFAULT_OP_TIME_LIMIT,
        backward: bool = True, progress: bool = True, isolate: bool = False,
        json_path=None, markdown_path=None, compiled: bool = False, modules=None,
        properties=None) -> dict:
    """Run the conformance check; returns {"meta", "summary", "results"} (also written as JSON
    and markdown when paths are given). `ops` restricts to op names, `budget` is in seconds.
    `modules` (True, or a list of names) checks module_db instead of op_db; `properties` (True,
    or a list of property names) checks the op properties instead of forward and backward.
    `isolate` runs the checks in child processes, so that an op which crashes or hangs the
    interpreter is recorded as a failure instead of ending the run."""
    if sum([bool(compiled), modules is not None, properties is not None]) > 1:
        raise ValueError("--compiled, --modules and --properties are separate runs: choose one")
    mode = "modules" if modules is not None else "properties" if properties is not None else "ops"
    chosen = suite(mode)
    if mode == "modules":
        if ops:
            raise ValueError("--ops names OpInfos; pass module names to --modules")
        ops = None if modules is True else modules
    selected = chosen.select(chosen.load(), ops)
    dtypes = [parse_dtype(d) for d in (dtypes or chosen.default_dtypes)]
    started = time.monotonic()
    results = []
    opts = dict(max_samples=max_samples, op_time_limit=op_time_limit)
    if mode == "ops":
        opts.update(backward=backward, compiled=compiled)
    elif mode == "modules":
        opts.update(backward=backward)
    else:
        from .properties import parse_properties
        opts.update(properties=list(parse_properties(None if properties is True else properties)))
    with _Progress(len(selected) * len(dtypes), len(dtypes), progress) as bar:
        def add(row):
            if compiled:  # rows from crashed children arrive in eager classes
                from .compiled import classify
                row = {k: classify(v) if k in ("forward", "backward") else v for k, v in row.items()}
            results.append(row)
            bar.add(row)

        if isolate:
            from . import isolate as isolation

            deadline = time.time() + budget if budget else None
            isolation.run_isolated([chosen.item_name(x) for x in selected], dtypes, opts, deadline,
                                   add, suite_name=mode)
        else:
            units = [(x, d) for x in selected for d in dtypes]
            check_all(units, opts, started + budget if budget else math.inf, add, check_fn=chosen.check)
    data = {
        "meta": {"torch": torch.__version__, "torch_ember": torch_ember.__version__, "suite": mode,
                 "dtypes": [dtype_name(d) for d in dtypes], "ops": len(selected),
                 "budget": budget, "isolate": isolate, **opts,
                 "seconds": round(time.monotonic() - started, 1)},
        "results": results,
    }
    data["summary"] = report.summarize(results, data["meta"]["dtypes"], compiled, mode)
    if json_path:
        report.write_json(data, json_path)
    if markdown_path:
        report.write_markdown(data, markdown_path)
    try:  # the knowledge base is a by-product: failing to record must never break the run
        from ..kb import record_run
        kind = {"ops": "conformance-compiled" if compiled else "conformance",
                "modules": "conformance-modules", "properties": "conformance-properties"}[mode]
        data["kb_run"] = record_run(kind, data)
    except Exception as e:  # noqa: BLE001
        print(f"warning: ember kb: run not recorded: {e!r}", file=sys.stderr)
    return data


def check_all(units, opts, end, add, trace=None, check_fn=check_op_dtype) -> None:
    """Check every (entry, dtype) unit in this process with `check_fn`, passing each row to
    `add`; silent fallback (counted, not warned) and no warnings while it runs."""
    old_mode = torch_ember.set_fallback_mode("silent")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ops warn about deprecated arguments by design
            for item, dtype in units:
                add(check_fn(item, dtype, end=end, trace=trace, **opts))
    finally:
        torch_ember.set_fallback_mode(old_mode)
        torch_ember.reset_fallback_stats()


def _names(text):
    """A comma-separated option value as a list; None for a bare flag (every entry)."""
    items = [x.strip() for x in (text or "").split(",") if x.strip()]
    return items or None


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="comma-separated op names (name or name.variant)")
    parser.add_argument("--dtypes", default=None,
                        help=f"comma-separated dtypes (default: {','.join(DEFAULT_DTYPES)}; with "
                             f"--modules {','.join(DEFAULT_MODULE_DTYPES)}; with --properties "
                             f"{','.join(DEFAULT_PROPERTY_DTYPES)})")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="total time budget; ops not reached are skipped (default: none)")
    parser.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES,
                        help="sample inputs per op and dtype (default: %(default)s)")
    parser.add_argument("--op-time-limit", type=float, default=DEFAULT_OP_TIME_LIMIT,
                        metavar="SECONDS", help="stop taking samples for an op and dtype after "
                        "this long (default: %(default)s)")
    parser.add_argument("--no-backward", action="store_true", help="skip the gradient checks")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--compiled", action="store_true",
                      help="run ember's side through torch.compile(backend='ember', fullgraph=True) and "
                           "classify as compiled-pass, compile-error, wrong, crash or skipped")
    mode.add_argument("--modules", nargs="?", const="", default=None, metavar="NAMES",
                      help="check module_db (nn layers, losses, norms) instead of op_db, forward and "
                           "backward in training mode: every module, or the comma-separated names "
                           "(nn.Linear or Linear)")
    mode.add_argument("--properties", nargs="?", const="", default=None, metavar="LIST",
                      help="check op properties instead of values: out (out= semantics), "
                           "noncontiguous, variants (method/in-place/operator/aliases), bool_bytes "
                           "(bool inputs with bytes 2..255); all, or the comma-separated ones")
    parser.add_argument("--json", metavar="PATH", help="write every result as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write a markdown report")
    parser.add_argument("--no-progress", action="store_true", help="no progress output")
    parser.add_argument("--no-isolate", action="store_true",
                        help="run in this process (faster start; a crashing op ends the run)")
    return parser


def main(argv=None, prog: str | None = None) -> int:
    """Command line entry; exit status 1 when any result failed."""
    args = build_parser(prog).parse_args(argv)
    modules = None if args.modules is None else (_names(args.modules) or True)
    properties = None if args.properties is None else (_names(args.properties) or True)
    try:
        data = run(ops=_names(args.ops), dtypes=_names(args.dtypes),
                   budget=args.budget, max_samples=args.max_samples,
                   op_time_limit=args.op_time_limit, backward=not args.no_backward,
                   progress=not args.no_progress, isolate=not args.no_isolate,
                   json_path=args.json, markdown_path=args.markdown, compiled=args.compiled,
                   modules=modules, properties=properties)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.format_summary(data))
    return 1 if report.failures(data["results"], args.compiled) else 0
