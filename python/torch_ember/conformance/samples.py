"""From per-sample outcomes to one class per (item, dtype, pass): the folding every check shares
(OpInfo forward and backward, module_db modules, the op properties), so that native-pass,
fallback-pass, fail and skipped mean the same thing in every report."""
from __future__ import annotations

import itertools
import time

import torch

from . import check


def skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason}


def skipped_row(name: str, dtype: torch.dtype, reason: str, passes) -> dict:
    """A row whose every pass was skipped for the same reason (time budget, unsupported dtype)."""
    from .opdb import dtype_name

    return {"op": name, "dtype": dtype_name(dtype), **{p: skipped(reason) for p in passes}}


def run_samples(make_samples, check_fn, max_samples, deadline, trace, describe=None) -> dict:
    """Check up to `max_samples` of the samples `make_samples()` yields (stopping at `deadline`)
    and fold them into one class. `trace(index, summary)` is called before each sample is
    checked; `describe(sample)` gives that summary (default: the OpInfo SampleInput's own)."""
    describe = describe or (lambda s: s.summary())
    start = time.monotonic()
    torch.manual_seed(0)  # the same samples every run, so a failure can be replayed
    ran = failures = 0
    fallback: set[str] = set()
    skip_reasons: set[str] = set()
    first_fail, note = None, ""
    try:
        samples = iter(make_samples())
    except Exception as e:
        return skipped("sample_inputs raised " + check.truncate(repr(e), 200))
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
        summary = check.truncate(describe(sample), 600)
        trace(index, summary)
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
                              "sample": summary, "sample_fallback": sorted(outcome.fallback)}
    rec = {"samples": ran, "fallback_ops": sorted(fallback),
           "seconds": round(time.monotonic() - start, 3)}
    if note:
        rec["note"] = note
    if first_fail is not None:
        return {"status": "fail", **rec, **first_fail, "failed_samples": failures,
                "native": not first_fail["sample_fallback"]}
    if ran == 0:
        return {**rec, **skipped("; ".join(sorted(skip_reasons)) or note or "no samples")}
    return {"status": "fallback-pass" if fallback else "native-pass", **rec}
