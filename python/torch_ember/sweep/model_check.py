"""One model of the sweep, checked in its own process: build it from a reduced config, run forward
and backward (with labels) on the CPU, on ember eagerly and on ember compiled strictly
(torch.compile(backend="ember"), no fallback option), and compare losses and gradients with
the CPU. Prints one JSON record on its last line of stdout.

  python -m torch_ember.sweep.model_check llama causal
"""
import copy
import json
import sys
import time
import traceback
import warnings

from .results import portable

# Parity: the largest error of the loss and of every gradient, relative to the largest value of
# the CPU's tensor, must stay below this (float32; kernels accumulate in other orders).
RTOL = 2e-3


def _first_line(e: BaseException) -> str:
    # Dynamo wraps the backend's exception (BackendCompilerFailed's first
    # line names only the backend); report the innermost cause instead.
    root = getattr(e, "inner_exception", None) or e.__cause__
    if root is not None and root is not e:
        return f"{type(e).__name__} <- {_first_line(root)}"[:400]
    lines = [ln.strip() for ln in portable(str(e)).splitlines() if ln.strip()]
    for ln in lines:
        if "ember" in ln or "aten" in ln or "Error" in ln:
            return f"{type(e).__name__}: {ln}"[:400]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


def category(e: BaseException) -> str:
    text = str(e)
    if "cannot translate" in text or "has no ember kernel" in text:
        return "unsupported op"
    name = type(e).__name__
    if name in ("BackendCompilerFailed", "CompileError") or "backend='ember'" in text:
        return "compile error"
    return "error"


def _loss_and_grads(model, batch, call=None):
    """Loss and parameter gradients of `model`; `call` runs it (the compiled wrapper), whose own
    parameter names carry a prefix, so gradients are read from the module itself."""
    out = (model if call is None else call)(**batch)
    loss = out.loss if getattr(out, "loss", None) is not None else out[0].float().square().mean()
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach().cpu(), grads


def _parity(got, ref) -> dict:
    import torch

    # Errors relative to the tensor's own scale, floored at a thousandth of the largest gradient:
    # some gradients are zero in exact arithmetic (a key projection's bias under softmax), so
    # what the CPU holds there is rounding noise, not a scale.
    floor = max((g.abs().max().item() for g in ref[1].values() if g.numel()), default=0.0) * 1e-3

    def rel(a, b, lo=0.0):
        if not b.numel():
            return 0.0
        scale = max(b.abs().max().item(), lo)
        return (a.double() - b.double()).abs().max().item() / (scale + 1e-12)

    loss_rel = rel(got[0], ref[0])
    missing = sorted(set(ref[1]) - set(got[1]))
    worst, worst_name = 0.0, ""
    for name, g in ref[1].items():
        if name in got[1]:
            r = rel(got[1][name], g, floor)
            if not r <= worst:  # NaN counts as worst
                worst, worst_name = r, name
    finite = bool(torch.isfinite(got[0]).all())
    return {"loss_rel": loss_rel, "grad_rel": worst, "worst_grad": worst_name, "missing_grads": missing[:5],
            "tolerance": RTOL, "ok": finite and loss_rel <= RTOL and worst <= RTOL and not missing}


def check(model_type: str, task: str, compiled: bool = True) -> dict:
    import torch
    import torch_ember
    from torch_ember.sweep import tiny_hf

    warnings.filterwarnings("ignore")
    torch_ember.set_fallback_mode("silent")
    rec = {"model": model_type, "task": task, "built": False, "eager": "skip", "compiled": "skip"}
    try:
        model = tiny_hf.build(model_type, task)
        rec["built"] = True
        rec["parameters"] = sum(p.numel() for p in model.parameters())
        batch = lambda d: tiny_hf.inputs(task, d, config=model.config)  # noqa: E731
        ref = _loss_and_grads(copy.deepcopy(model), batch("cpu"))
    except Exception as e:
        rec.update(failure=_first_line(e), category="could not build")
        return rec

    try:
        torch_ember.reset_fallback_stats()
        ember = copy.deepcopy(model).to("ember")
        t0 = time.perf_counter()
        got = _loss_and_grads(ember, batch("ember"))
        rec["eager_seconds"] = round(time.perf_counter() - t0, 3)
        rec["fallback_ops"] = {r.op: r.calls for r in torch_ember.fallback_report()}
        rec["eager_parity"] = _parity(got, ref)
        rec["eager"] = "pass" if rec["eager_parity"]["ok"] else "fail"
        if rec["eager"] == "fail":
            rec.update(failure=f"eager: values differ from CPU ({rec['eager_parity']})"[:400], category="wrong values")
    except Exception as e:
        rec["eager"] = "fail"
        rec.update(failure="eager: " + _first_line(e), category="error")

    if not compiled:
        return rec
    try:
        torch._dynamo.reset()
        torch_ember.reset_compile_stats()
        ember = copy.deepcopy(model).to("ember")
        t0 = time.perf_counter()
        got = _loss_and_grads(ember, batch("ember"), torch.compile(ember, backend="ember"))
        rec["compile_cold_seconds"] = round(time.perf_counter() - t0, 3)
        stats = torch_ember.compile_stats()
        rec["graphs"] = len(stats)
        rec["library_steps"] = sorted({op for r in stats for op, _ in r["library_ops"]})
        rec["compiled_parity"] = _parity(got, ref)
        rec["compiled"] = "pass" if rec["compiled_parity"]["ok"] else "fail"
        if rec["compiled"] == "fail" and "failure" not in rec:
            rec.update(failure=f"compiled: values differ from CPU ({rec['compiled_parity']})"[:400],
                       category="wrong values")
        # Warm: the same model again with Dynamo's caches cleared; Ember's on-disk cache hits.
        torch._dynamo.reset()
        ember = copy.deepcopy(model).to("ember")
        t0 = time.perf_counter()
        _loss_and_grads(ember, batch("ember"), torch.compile(ember, backend="ember"))
        rec["compile_warm_seconds"] = round(time.perf_counter() - t0, 3)
    except Exception as e:
        rec["compiled"] = "fail"
        if "failure" not in rec:
            rec.update(failure="compiled: " + _first_line(e), category=category(e),
                       traceback=traceback.format_exc()[-2000:])
        else:
            rec["compiled_failure"] = _first_line(e)
    return rec


def main() -> int:
    model_type, task = sys.argv[1], sys.argv[2]
    compiled = "--no-compile" not in sys.argv
    try:
        rec = check(model_type, task, compiled)
    except BaseException as e:  # a bug in the check itself: still one record
        rec = {"model": model_type, "task": task, "built": False, "eager": "skip", "compiled": "skip",
               "failure": _first_line(e), "category": "error", "traceback": traceback.format_exc()[-2000:]}
    sys.stdout.flush()
    print("\n" + json.dumps(rec, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
