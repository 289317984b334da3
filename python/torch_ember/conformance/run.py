"""OpInfo conformance: every op in PyTorch's `op_db`, run on ember and compared with the CPU.

For each OpInfo and dtype (default float32, bfloat16, int64, bool; only those the op supports on
the CPU) up to --max-samples sample inputs run once on the CPU and once with every tensor copied to
ember. Outputs must match (`torch.testing.assert_close`, equal_nan, exact dtypes and exact integer
results; float tolerances are assert_close's, a little looser for float32/bf16/fp16, widened by
the OpInfo's own cross-device overrides); when the CPU raises, ember must raise too. Outputs that
draw random numbers are compared by shape and dtype only. For float32 the gradients of the sum of
all floating outputs are compared too. Each (op, dtype), forward and backward, is classified:

  native-pass    matched, and nothing fell back to the CPU
  fallback-pass  matched, but some aten ops ran on the CPU fallback (listed)
  fail           wrong values or an unexpected error (message, failing sample, fallen-back ops)
  skipped        with a reason: dtype unsupported, random output, time budget, ...

A failure whose failing sample had no fallback at all points at an ember kernel: those are
listed first in the summary, after any op that crashed or hung the process (from the command
line the checks run in a child process, restarted after a crash: a crash costs one op, not the
run).

  python -m torch_ember.cli conformance --ops add,mm --dtypes float32      # a few ops
  python -m torch_ember.cli conformance --budget 1200 \\
      --json /tmp/conformance.json --markdown /tmp/conformance.md           # the full op_db
  python -m torch_ember.cli conformance --compiled --max-samples 2          # through torch.compile

The full run takes a few minutes on two cores. `python -m torch_ember.conformance` and the
`ember conformance` script take the same options; from Python, `run.run(...)` returns the dict.
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
import types
import unittest
import warnings

import torch

import torch_ember

from . import check, report

DEFAULT_DTYPES = ("float32", "bfloat16", "int64", "bool")
DEFAULT_MAX_SAMPLES = 8
DEFAULT_OP_TIME_LIMIT = 5.0

# Outputs drawn from an RNG or left uninitialised: ember's stream cannot match the CPU's, so
# only shapes and dtypes are compared (and no gradients).
RANDOM_OPS = frozenset({
    "bernoulli", "cauchy", "empty", "empty_like", "empty_permuted", "empty_strided",
    "exponential", "geometric", "log_normal", "multinomial", "new_empty", "new_empty_strided",
    "nn.functional.alpha_dropout", "nn.functional.dropout", "nn.functional.dropout2d",
    "nn.functional.dropout3d", "nn.functional.feature_alpha_dropout",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "nn.functional.rrelu", "normal", "pca_lowrank", "rand_like", "randint", "randint_like",
    "randn", "randn_like", "svd_lowrank", "uniform",
})

# OpInfos left out (by name, or name.variant for one variant), with the reason recorded.
SKIP_OPS: dict[str, str] = {
    # Its samples are views that as_strided reads past, into the rest of the base's storage; a
    # copy to another device keeps only the view, so the CPU and ember read different memory.
    "as_strided.partial_views": "reads storage outside the input view",
}


def load_op_db():
    """op_db lives in torch's internal test package, whose common_utils imports `expecttest` for
    expect-file tests only. Without it installed, a stand-in is enough for the harness."""
    try:
        import expecttest  # noqa: F401
    except ModuleNotFoundError:
        stub = types.ModuleType("expecttest")
        stub.TestCase, stub.ACCEPT = unittest.TestCase, False
        sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def select_ops(op_db, names=None):
    """All of op_db, or those whose name or name.variant is listed (a bare name takes every
    variant)."""
    if not names:
        return list(op_db)
    wanted = set(names)
    chosen = [op for op in op_db if op.name in wanted or full_name(op) in wanted]
    unknown = wanted - {op.name for op in chosen} - {full_name(op) for op in chosen}
    if unknown:
        raise ValueError(f"not in op_db: {', '.join(sorted(unknown))}")
    return chosen


def parse_dtype(name) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason}


def _run_samples(op, dtype, requires_grad, check_fn, max_samples, deadline, trace) -> dict:
    """Check up to `max_samples` samples (stopping at `deadline`) and fold them into one class.
    `trace(index, sample)` is called before each sample is checked."""
    start = time.monotonic()
    torch.manual_seed(0)  # the same samples every run, so a failure can be replayed
    ran = failures = 0
    fallback: set[str] = set()
    skip_reasons: set[str] = set()
    first_fail, note = None, ""
    try:
        samples = iter(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
    except Exception as e:
        return _skipped("sample_inputs raised " + check.truncate(repr(e), 200))
    for index in itertools.count():
        if index >= max_samples:
            break
        if index and time.monotonic() > deadline:
            note = f"time limit: stopped after {index} samples"
            break
        try:
            sample = next(samples)
        except StopIteration:
            break
        except Exception as e:
            note = "sample_inputs raised " + check.truncate(repr(e), 200)
            break
        trace(index, sample)
        try:
            outcome = check_fn(sample)
        except Exception as e:  # the harness's own copies to ember failed
            outcome = check.Outcome("fail", check.fallback_ops(),
                                    "harness: " + check.error_text(e))
        if outcome.status == "skip":
            skip_reasons.add(outcome.message)
            continue
        ran += 1
        fallback.update(outcome.fallback)
        if outcome.status == "fail":
            failures += 1
            if first_fail is None:
                first_fail = {"message": outcome.message, "sample_index": index,
                              "sample": check.truncate(sample.summary(), 600),
                              "sample_fallback": sorted(outcome.fallback)}
    rec = {"samples": ran, "fallback_ops": sorted(fallback),
           "seconds": round(time.monotonic() - start, 3)}
    if note:
        rec["note"] = note
    if first_fail is not None:
        return {"status": "fail", **rec, **first_fail, "failed_samples": failures,
                "native": not first_fail["sample_fallback"]}
    if ran == 0:
        return {**rec, **_skipped("; ".join(sorted(skip_reasons)) or note or "no samples")}
    return {"status": "fallback-pass" if fallback else "native-pass", **rec}


def skipped_row(op_name: str, dtype: torch.dtype, reason: str, backward: bool) -> dict:
    rec = {"op": op_name, "dtype": dtype_name(dtype), "forward": _skipped(reason)}
    if backward and dtype == torch.float32:
        rec["backward"] = _skipped(reason)
    return rec


def check_op_dtype(op, dtype, *, max_samples, op_time_limit, end, backward, trace=None,
                   compiled: bool = False) -> dict:
    """One result row: forward (and, for float32 with autograd, backward) of `op` at `dtype`.
    `trace(pass, index, sample, result)` runs before each sample and, with the result, after
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
    trace = trace or (lambda kind, index, sample, result=None: None)
    want_backward = backward and dtype == torch.float32
    skip = None
    if time.monotonic() >= end:
        skip = "time budget"
    elif op.name in SKIP_OPS or full_name(op) in SKIP_OPS:
        skip = SKIP_OPS.get(full_name(op)) or SKIP_OPS[op.name]
    elif dtype not in op.supported_dtypes("cpu"):
        skip = "dtype unsupported"
    if skip:
        return skipped_row(full_name(op), dtype, skip, backward)

    rec = {"op": full_name(op), "dtype": dtype_name(dtype)}
    overrides = check.tolerances(op, dtype)
    random = op.name in RANDOM_OPS
    deadline = min(time.monotonic() + op_time_limit, end)
    rec["forward"] = _run_samples(
        op, dtype, False, lambda s: check.check_forward(op, s, overrides, shape_only=random),
        max_samples, deadline, lambda i, s: trace("forward", i, s))
    trace("forward", None, None, rec["forward"])
    if not want_backward:
        return rec
    if not op.supports_autograd:
        rec["backward"] = _skipped("no autograd support")
    elif random:
        rec["backward"] = _skipped("random output")
    elif dtype not in op.supported_backward_dtypes("cpu"):
        rec["backward"] = _skipped("dtype unsupported for backward")
    elif time.monotonic() >= end:
        rec["backward"] = _skipped("time budget")
    else:
        deadline = min(time.monotonic() + op_time_limit, end)
        rec["backward"] = _run_samples(
            op, dtype, True, lambda s: check.check_backward(op, s, overrides),
            max_samples, deadline, lambda i, s: trace("backward", i, s))
    return rec


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
            parts = [f"{r['dtype']}={r['forward']['status']}" for r in rows]
            parts += [f"backward={r['backward']['status']}" for r in rows if "backward" in r]
            print(f"[{self.done}/{self.total}] {row['op']}: {' '.join(parts)}", file=sys.stderr,
                  flush=True)
        self.pending = []


def run(ops=None, dtypes=DEFAULT_DTYPES, budget: float | None = None,
        max_samples: int = DEFAULT_MAX_SAMPLES, op_time_limit: float = DEFAULT_OP_TIME_LIMIT,
        backward: bool = True, progress: bool = True, isolate: bool = False,
        json_path=None, markdown_path=None, compiled: bool = False) -> dict:
    """Run the conformance check; returns {"meta", "summary", "results"} (also written as JSON
    and markdown when paths are given). `ops` restricts to op names, `budget` is in seconds.
    `isolate` runs the checks in child processes, so that an op which crashes or hangs the
    interpreter is recorded as a failure instead of ending the run."""
    selected = select_ops(load_op_db(), ops)
    dtypes = [parse_dtype(d) for d in dtypes]
    started = time.monotonic()
    results = []
    opts = dict(max_samples=max_samples, op_time_limit=op_time_limit, backward=backward, compiled=compiled)
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
            isolation.run_isolated([full_name(op) for op in selected], dtypes, opts, deadline, add)
        else:
            units = [(op, d) for op in selected for d in dtypes]
            check_all(units, opts, started + budget if budget else math.inf, add)
    data = {
        "meta": {"torch": torch.__version__, "torch_ember": torch_ember.__version__,
                 "dtypes": [dtype_name(d) for d in dtypes], "ops": len(selected),
                 "budget": budget, "isolate": isolate, **opts,
                 "seconds": round(time.monotonic() - started, 1)},
        "results": results,
    }
    data["summary"] = report.summarize(results, data["meta"]["dtypes"], compiled)
    if json_path:
        report.write_json(data, json_path)
    if markdown_path:
        report.write_markdown(data, markdown_path)
    try:  # the knowledge base is a by-product: failing to record must never break the run
        from ..kb import record_run
        data["kb_run"] = record_run("conformance-compiled" if compiled else "conformance", data)
    except Exception as e:  # noqa: BLE001
        print(f"warning: ember kb: run not recorded: {e!r}", file=sys.stderr)
    return data


def check_all(units, opts, end, add, trace=None) -> None:
    """Check every (op, dtype) unit in this process, passing each row to `add`; silent fallback
    (counted, not warned) and no warnings while it runs."""
    old_mode = torch_ember.set_fallback_mode("silent")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ops warn about deprecated arguments by design
            for op, dtype in units:
                add(check_op_dtype(op, dtype, end=end, trace=trace, **opts))
    finally:
        torch_ember.set_fallback_mode(old_mode)
        torch_ember.reset_fallback_stats()


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", help="comma-separated op names (name or name.variant)")
    parser.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES),
                        help="comma-separated dtypes (default: %(default)s)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="total time budget; ops not reached are skipped (default: none)")
    parser.add_argument("--max-samples", type=int, default=DEFAULT_MAX_SAMPLES,
                        help="sample inputs per op and dtype (default: %(default)s)")
    parser.add_argument("--op-time-limit", type=float, default=DEFAULT_OP_TIME_LIMIT,
                        metavar="SECONDS", help="stop taking samples for an op and dtype after "
                        "this long (default: %(default)s)")
    parser.add_argument("--no-backward", action="store_true", help="skip the gradient checks")
    parser.add_argument("--compiled", action="store_true",
                        help="run ember's side through torch.compile(backend='ember', fullgraph=True) and "
                             "classify as compiled-pass, compile-error, wrong, crash or skipped")
    parser.add_argument("--json", metavar="PATH", help="write every result as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="write a markdown report")
    parser.add_argument("--no-progress", action="store_true", help="no progress output")
    parser.add_argument("--no-isolate", action="store_true",
                        help="run in this process (faster start; a crashing op ends the run)")
    return parser


def main(argv=None, prog: str | None = None) -> int:
    """Command line entry; exit status 1 when any result failed."""
    args = build_parser(prog).parse_args(argv)
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]  # noqa: E731
    try:
        data = run(ops=split(args.ops) if args.ops else None, dtypes=split(args.dtypes),
                   budget=args.budget, max_samples=args.max_samples,
                   op_time_limit=args.op_time_limit, backward=not args.no_backward,
                   progress=not args.no_progress, isolate=not args.no_isolate,
                   json_path=args.json,
                   markdown_path=args.markdown, compiled=args.compiled)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.format_summary(data))
    return 1 if report.failures(data["results"], args.compiled) else 0
