"""One case of `ember sweep flex`: a FlexAttention variant (score_mod and/or mask_mod, with the
block mask built on ember) at one shape, run eagerly or under torch.compile(backend="ember"),
forward and backward, against a dense float64 reference on the CPU.

The reference is FlexAttention's own math written out (torch/_higher_order_ops/flex_attention.py,
math_attention): scores = q @ kᵀ · scale, then score_mod, then -inf where mask_mod is False, a
softmax whose fully masked rows give output 0 and logsumexp -inf, GQA by repeating each key/value
head over its group of query heads. The same score_mod/mask_mod functions run in both: FlexAttention
vmaps them over scalar (b, h, q, kv) indices, the reference calls them once on broadcast index
tensors. Inputs are drawn in float64, rounded to float32 for ember, and the reference computes on the
rounded values, so only ember's arithmetic is measured.

Pass: for the output, the logsumexp (return_lse=True, compared where it is finite and -inf where the
reference's is) and each gradient (q, k, v and any learned parameter of the score_mod), the largest
error divided by the largest magnitude of the reference tensor stays within FWD_TOL / BWD_TOL. The
loss sums out·g + lse·g' with random g, g', so the backward also carries a logsumexp gradient.

  python -m torch_ember.sweep.flex_check --worker     # read case names on stdin, answer JSON lines
"""
import json
import math
import sys
import time
import traceback
from dataclasses import dataclass

from .results import portable

# float32 kernels against float64: errors relative to the reference tensor's largest magnitude.
FWD_TOL = 1e-5
BWD_TOL = 1e-4
MARK = "@@flex "  # prefixes the worker's answers, so stray prints on stdout do not confuse the parent


@dataclass(frozen=True)
class Shape:
    B: int
    H: int
    M: int  # query length
    N: int  # key/value length
    D: int

    @property
    def name(self) -> str:
        return f"{self.B}x{self.H}x{self.M}x{self.N}x{self.D}"


SHAPES = (Shape(1, 2, 64, 64, 16), Shape(2, 4, 128, 128, 32), Shape(2, 4, 64, 128, 16))
MODES = ("eager", "compiled")


# --------------------------------------------------------------------------- the variants
# Each builder gets the shape and a dict `t` of captured tensors (on ember for FlexAttention, float64
# on the CPU for the reference) and returns (score_mod, mask_mod). The functions use only tensor
# operations, so they run both under FlexAttention's vmap and on broadcast index tensors.

def _causal(b, h, q, kv):
    return q >= kv


def _window(s: Shape):
    return max(8, s.N // 8)


@dataclass(frozen=True)
class Variant:
    name: str
    doc: str
    build: object                                  # (shape, t) -> (score_mod | None, mask_mod | None)
    buffers: object = None                         # (shape, generator) -> {name: CPU tensor}, captured constants
    params: object = None                          # (shape, generator) -> {name: CPU float64}, learned
    gqa: bool = False


def _doc_ids(s: Shape, gen):
    import torch

    # Four documents of random lengths (seed fixed by the case), over the longer of the two sequences.
    n = max(s.M, s.N)
    cuts = sorted(torch.randperm(n - 1, generator=gen)[:3].add(1).tolist())
    ids = torch.zeros(n, dtype=torch.int64)
    for c in cuts:
        ids[c:] += 1
    return {"doc": ids}


def _natten(s: Shape, t):
    import torch

    # The key sequence is a canvas of rows of `w` tokens; each query (at its own canvas position)
    # attends to the 3×3 window around it, the window's centre clamped into the canvas so that every
    # query sees nine keys (attention-gym masks/natten.py).
    w, half = 8, 1
    rows = s.N // w

    def mask(b, h, q, kv):
        qx, qy = q // w, q % w
        kx, ky = kv // w, kv % w
        cx = torch.clamp(qx, half, rows - 1 - half)
        cy = torch.clamp(qy, half, w - 1 - half)
        return ((cx - kx).abs() <= half) & ((cy - ky).abs() <= half)

    return None, mask


def _bias_table(s: Shape, gen):
    import torch

    return {"table": 0.5 * torch.randn(s.H, s.M + s.N - 1, generator=gen, dtype=torch.float64)}


def _exp2(x):
    import torch

    return torch.exp2(x)


def _tanh(x):
    import torch

    return torch.tanh(x)


VARIANTS = {v.name: v for v in (
    Variant("noop", "no score_mod, no mask", lambda s, t: (None, None)),
    Variant("causal", "mask q >= kv", lambda s, t: (None, _causal)),
    Variant("sliding_window", "causal and q - kv <= W (W = N/8, at least 8)",
            lambda s, t: (None, lambda b, h, q, kv: (q >= kv) & (q - kv <= _window(s)))),
    Variant("prefix_lm", "kv < P (P = N/8, at least 8) or causal",
            lambda s, t: (None, lambda b, h, q, kv: (kv < _window(s)) | (q >= kv))),
    Variant("document", "same document (captured int ids, 4 random lengths) and causal",
            lambda s, t: (None, lambda b, h, q, kv: (t["doc"][q] == t["doc"][kv]) & (q >= kv)),
            buffers=_doc_ids),
    Variant("alibi", "s + (kv - q)·2^(-8(h+1)/H), causal",
            lambda s, t: (lambda sc, b, h, q, kv: sc + (kv - q) * _exp2(-8.0 * (h + 1) / s.H), _causal)),
    Variant("relative_position", "s + (q - kv)/16",
            lambda s, t: (lambda sc, b, h, q, kv: sc + (q - kv) / 16.0, None)),
    Variant("head_bias", "s + 2·h",
            lambda s, t: (lambda sc, b, h, q, kv: sc + 2.0 * h, None)),
    Variant("softcap", "2·tanh(s/2), causal",
            lambda s, t: (lambda sc, b, h, q, kv: 2.0 * _tanh(sc / 2.0), _causal)),
    Variant("gqa", "enable_gqa=True with H/2 key/value heads, causal", lambda s, t: (None, _causal), gqa=True),
    Variant("gqa_alibi", "enable_gqa=True, ALiBi by query head, no mask",
            lambda s, t: (lambda sc, b, h, q, kv: sc + (kv - q) * _exp2(-8.0 * (h + 1) / s.H), None),
            gqa=True),
    Variant("natten_2d", "2-D neighbourhood: 3×3 window on a canvas of rows of 8 keys", _natten),
    Variant("empty_rows", "every 4th query row fully masked (output 0, lse -inf), others causal",
            lambda s, t: (None, lambda b, h, q, kv: (q % 4 != 0) & (q >= kv))),
    Variant("learned_bias", "s + table[h, q - kv + N - 1], a learned nn.Parameter (its gradient checked), causal",
            lambda s, t: (lambda sc, b, h, q, kv: sc + t["table"][h, q - kv + s.N - 1], _causal),
            params=_bias_table),
)}


def cases(variants=None, shapes=SHAPES, modes=MODES) -> list[str]:
    names = list(VARIANTS) if variants is None else list(variants)
    return [case_name(v, s, m) for v in names for s in shapes for m in modes]


def case_name(variant: str, shape: Shape, mode: str) -> str:
    return f"{variant} {shape.name} {mode}"


def parse_case(name: str):
    variant, shape, mode = name.split()
    return VARIANTS[variant], Shape(*map(int, shape.split("x"))), mode


# --------------------------------------------------------------------------- the reference

def reference(q, k, v, score_mod, mask_mod, scale, gqa):
    """FlexAttention's math, dense, in the inputs' dtype: (out, lse) with lse in natural-log units."""
    import torch

    B, Hq, M, _ = q.shape
    N = k.shape[2]
    if gqa:
        k, v = (t.repeat_interleave(Hq // t.shape[1], dim=1) for t in (k, v))
    s = q @ k.transpose(-1, -2) * scale
    b = torch.arange(B).view(B, 1, 1, 1)
    h = torch.arange(Hq).view(1, Hq, 1, 1)
    qi = torch.arange(M).view(1, 1, M, 1)
    ki = torch.arange(N).view(1, 1, 1, N)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki).expand(B, Hq, M, N)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, qi, ki).expand(B, Hq, M, N), float("-inf"))
    m = s.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    denom = e.sum(-1, keepdim=True)
    empty = denom == 0  # a fully masked row: output 0, logsumexp -inf
    safe = torch.where(empty, torch.ones_like(denom), denom)
    out = (e / safe) @ v
    lse = torch.where(empty, torch.full_like(denom, float("-inf")), m + torch.log(safe)).squeeze(-1)
    return out, lse


# --------------------------------------------------------------------------- one case

def first_line(e: BaseException) -> str:
    root = getattr(e, "inner_exception", None) or e.__cause__
    if root is not None and root is not e:
        return f"{type(e).__name__} <- {first_line(root)}"[:400]
    lines = [ln.strip() for ln in portable(str(e)).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


def _rel(got, ref) -> float:
    """Largest error over the reference's largest magnitude; -inf entries must match exactly."""
    import torch

    got, ref = got.detach().cpu().double(), ref.detach().double()
    if got.shape != ref.shape:
        return float("inf")
    fin = torch.isfinite(ref)
    if not bool((got[~fin] == ref[~fin]).all()):
        return float("inf")
    if not fin.any():
        return 0.0
    err = (got[fin] - ref[fin]).abs().max().item()
    scale = ref[fin].abs().max().item()
    return err / max(scale, 1e-30) if math.isfinite(err) else float("inf")


def _module(variant: Variant, shape: Shape, buffers, params, block_mask):
    """What a user writes: a module whose forward calls flex_attention, with the score_mod's
    learned tables registered as nn.Parameters."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    class Attend(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.learned = torch.nn.ParameterDict({k: torch.nn.Parameter(v) for k, v in params.items()})

        def forward(self, q, k, v):
            score_mod, _ = variant.build(shape, {**buffers, **dict(self.learned.items())})
            return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask,
                                  enable_gqa=variant.gqa, return_lse=True)

    return Attend()


def check(name: str, seed: int = 0) -> dict:
    """Run one case; returns its record (status pass/fail, errors, times, failure's first line)."""
    import torch
    import torch_ember
    from torch.nn.attention.flex_attention import create_block_mask

    variant, shape, mode = parse_case(name)
    rec = {"case": name, "variant": variant.name, "shape": shape.name, "mode": mode, "status": "fail",
           "tolerance": {"forward": FWD_TOL, "backward": BWD_TOL}}
    stage = "setup"
    try:
        gen = torch.Generator().manual_seed(seed)
        hkv = max(1, shape.H // 2) if variant.gqa else shape.H
        cpu = [torch.randn(shape.B, h, n, shape.D, generator=gen, dtype=torch.float64).float().double()
               for h, n in ((shape.H, shape.M), (hkv, shape.N), (hkv, shape.N))]
        g_out = torch.randn(shape.B, shape.H, shape.M, shape.D, generator=gen, dtype=torch.float64).float().double()
        g_lse = torch.randn(shape.B, shape.H, shape.M, generator=gen, dtype=torch.float64).float().double()
        bufs = variant.buffers(shape, gen) if variant.buffers else {}
        params = {k: p.float().double() for k, p in (variant.params(shape, gen) if variant.params else {}).items()}
        scale = 1.0 / math.sqrt(shape.D)

        # The reference, float64 on the CPU, with autograd for its gradients.
        ref_in = [t.clone().requires_grad_() for t in cpu]
        ref_params = {k: p.clone().requires_grad_() for k, p in params.items()}
        score_mod, mask_mod = variant.build(shape, {**bufs, **ref_params})
        ref_out, ref_lse = reference(*ref_in, score_mod, mask_mod, scale, variant.gqa)
        fin = torch.isfinite(ref_lse)
        ((ref_out * g_out).sum() + torch.where(fin, ref_lse, 0.0).mul(g_lse).sum()).backward()
        ref_grads = {**{n: t.grad for n, t in zip("qkv", ref_in)}, **{k: p.grad for k, p in ref_params.items()}}

        # Ember: the block mask built on ember, then the module eagerly or compiled.
        stage = "block mask"
        torch._dynamo.reset()
        torch_ember.reset_fallback_stats()
        torch_ember.reset_compile_stats()
        ebufs = {k: b.to("ember") for k, b in bufs.items()}
        _, emask = variant.build(shape, ebufs)
        t0 = time.perf_counter()
        bm = create_block_mask(emask, None, None, shape.M, shape.N, device="ember") if emask is not None else None
        rec["block_mask_seconds"] = round(time.perf_counter() - t0, 3)
        mod = _module(variant, shape, ebufs, {k: p.float().to("ember") for k, p in params.items()}, bm)
        fn = torch.compile(mod, backend="ember") if mode == "compiled" else mod
        ins = [t.float().to("ember").requires_grad_() for t in cpu]
        eg_out, eg_lse = g_out.float().to("ember"), g_lse.float().to("ember")

        def step():
            for t in (*ins, *mod.parameters()):
                t.grad = None
            out, lse = fn(*ins)
            # (lse > -inf, not isfinite: ember's eager isfinite falls back to the CPU for a mul.)
            lse_term = torch.where(lse > float("-inf"), lse, torch.zeros_like(lse)) * eg_lse
            ((out * eg_out).sum() + lse_term.sum()).backward()
            return out, lse

        stage = "forward/backward"
        t0 = time.perf_counter()
        out, lse = step()
        torch.ember.synchronize()
        first = time.perf_counter() - t0
        errors = {"out": _rel(out, ref_out), "lse": _rel(lse, ref_lse)}
        errors.update({n: _rel(t.grad, ref_grads[n]) if t.grad is not None else float("inf")
                       for n, t in zip("qkv", ins)})
        errors.update({k: _rel(p.grad, ref_grads[k]) if p.grad is not None else float("inf")
                       for k, p in mod.learned.items()})
        stage = "second call"
        t0 = time.perf_counter()
        step()
        torch.ember.synchronize()
        warm = time.perf_counter() - t0
        rec["first_call_seconds"] = round(first, 3)
        rec["warm_call_seconds"] = round(warm, 4)
        # Compile time: what the first call took beyond a warm call (Dynamo, AOT autograd and Ember's
        # compilation of the forward and backward graphs; for eager, FlexAttention's own tracing).
        rec["compile_seconds"] = round(max(0.0, first - warm), 3)
        rec["errors"] = {k: (v if math.isfinite(v) else "inf") for k, v in errors.items()}
        worst = max(errors.values())
        rec["max_error"] = worst if math.isfinite(worst) else "inf"
        rec["fallback_ops"] = {r.op: r.calls for r in torch_ember.fallback_report()}
        from ..flex import hop

        rec["kernels"] = hop.last_paths()  # fused, or dense and why
        if mode == "compiled":  # how Ember ran the graphs: library steps are ops it did not fuse
            stats = torch_ember.compile_stats()
            rec["graphs"] = len(stats)
            rec["library_steps"] = sorted({op for r in stats for op, _ in r["library_ops"]})
        bad = [k for k, v in errors.items() if not v <= (FWD_TOL if k in ("out", "lse") else BWD_TOL)]
        if bad:
            rec["category"] = "wrong values"
            rec["failure"] = "values differ from the float64 reference: " + ", ".join(
                f"{k} {errors[k]:.2e}" for k in bad)
        else:
            rec["status"] = "pass"
    except Exception as e:  # noqa: BLE001
        rec.update(category="error", failure=f"{stage}: {first_line(e)}", traceback=traceback.format_exc()[-2000:])
    finally:
        torch._dynamo.reset()
    return rec


# --------------------------------------------------------------------------- the worker process

def worker() -> int:
    """Answer case names read from stdin, one JSON record per line (prefixed with MARK)."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch  # noqa: F401
    import torch_ember

    torch_ember.set_fallback_mode("silent")
    print(MARK + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        try:
            rec = check(name)
        except BaseException as e:  # a bug in the check itself: still one record
            rec = {"case": name, "status": "fail", "category": "error", "failure": first_line(e)}
        print(MARK + json.dumps(rec, default=str), flush=True)
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        raise SystemExit(worker())
    for n in sys.argv[1:]:
        print(json.dumps(check(n), default=str, indent=1))
