"""`ember sweep flex`'s fast subset: a handful of FlexAttention variants at the smallest shape, eager
and compiled, forward and backward, each within the sweep's tolerances of the float64 reference
(run in this process); the reference itself against PyTorch's CPU flex_attention (forward, float64)
for every variant; and the CLI on two variants with --out, checking flex.json and flex.md."""
import json
import math

import pytest
import torch

import torch_ember  # noqa: F401  (registers ember, admits it to flex_attention)
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch_ember.sweep import flex, flex_check

SMALL = flex_check.SHAPES[0]
FAST = ["causal", "document", "softcap", "gqa", "empty_rows", "learned_bias"]


@pytest.mark.parametrize("mode", flex_check.MODES)
@pytest.mark.parametrize("variant", FAST)
def test_variant_matches_reference(variant, mode):
    rec = flex_check.check(flex_check.case_name(variant, SMALL, mode))
    assert rec["status"] == "pass", (rec.get("failure"), rec.get("traceback", "")[-800:])
    grads = {"q", "k", "v"} | ({"table"} if variant == "learned_bias" else set())
    assert set(rec["errors"]) == {"out", "lse"} | grads
    assert rec["compile_seconds"] >= 0 and rec["warm_call_seconds"] > 0
    assert rec["kernels"] == {"forward": "fused", "backward": "fused"}, rec["kernels"]


@pytest.mark.parametrize("variant", list(flex_check.VARIANTS))
def test_reference_matches_pytorch_cpu_flex(variant):
    """The oracle is PyTorch's own semantics: its CPU flex_attention (forward only: the CPU refuses
    the backward) agrees with the dense reference, fully masked rows and logsumexp included."""
    v = flex_check.VARIANTS[variant]
    s = flex_check.Shape(1, 4, 64, 128, 16)  # different query and key lengths; 4 heads for GQA
    gen = torch.Generator().manual_seed(0)
    hkv = s.H // 2 if v.gqa else s.H
    q = torch.randn(s.B, s.H, s.M, s.D, generator=gen, dtype=torch.float64)
    k, val = (torch.randn(s.B, hkv, s.N, s.D, generator=gen, dtype=torch.float64) for _ in range(2))
    t = {**(v.buffers(s, gen) if v.buffers else {}), **(v.params(s, gen) if v.params else {})}
    score_mod, mask_mod = v.build(s, t)
    bm = create_block_mask(mask_mod, None, None, s.M, s.N, device="cpu") if mask_mod else None
    out, lse = flex_attention(q, k, val, score_mod=score_mod, block_mask=bm, enable_gqa=v.gqa, return_lse=True)
    ref_out, ref_lse = flex_check.reference(q, k, val, score_mod, mask_mod, 1 / math.sqrt(s.D), v.gqa)
    assert flex_check._rel(out, ref_out) < 1e-12
    assert flex_check._rel(lse, ref_lse) < 1e-12
    if variant == "empty_rows":
        assert bool((ref_lse[..., ::4] == float("-inf")).all()) and not ref_out[..., ::4, :].any()


def test_cli_writes_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "flex"
    rc = flex.main(["--only", "noop,alibi", "--modes", "compiled", "--out", str(out), "--no-progress"])
    assert rc == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("6 of 6 passed; compiled: median compile"), line
    data = json.loads((out / "flex.json").read_text())
    assert data["sweep"] == "flex" and set(data) >= {"meta", "summary", "records"}
    assert [r["case"] for r in data["records"]] == [flex_check.case_name(v, s, "compiled")
                                                    for v in ("noop", "alibi") for s in flex_check.SHAPES]
    assert all(r["status"] == "pass" and r["max_error"] <= flex_check.FWD_TOL * 10 for r in data["records"])
    assert data["summary"]["cases"] == 6 and data["summary"]["by_variant"] == {"noop": "3/3", "alibi": "3/3"}
    assert data["summary"]["compile_median_seconds"] > 0
    assert "| noop 1x2x64x64x16 compiled | pass |" in (out / "flex.md").read_text()
    from torch_ember.kb.store import detect_kind, items_from
    assert detect_kind(data) == "sweep-flex"
    assert [it["status"] for it in items_from("sweep-flex", data)] == ["pass"] * 6


def test_timeout_is_recorded_and_the_sweep_goes_on(tmp_path):
    data = flex.run(only=["causal"], limit=2, time_limit=0.01, out=None, progress=False)
    assert [r["status"] for r in data["records"]] == ["timeout", "timeout"]
    assert data["records"][0]["failure"] == "no result within 0.01 s"


def test_unknown_variant_is_refused(capsys):
    assert flex.main(["--only", "nope"]) == 2
    assert "unknown variant: nope" in capsys.readouterr().err
