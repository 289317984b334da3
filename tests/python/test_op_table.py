"""The per-op table: every ATen op with an eager ember kernel has a compile route, and the
generated docs/op_table.md is what the table says today."""
import os
import subprocess
import sys

import torch

import torch_ember  # noqa: F401
from torch_ember.compile import op_table

aten = torch.ops.aten
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_what_runs_in_eager_compiles():
    rows = op_table.rows()
    assert len(rows) > 500
    stuck = [r for r in rows if r[1] in ("native", "composite") and r[3] == "none"]
    assert not stuck, stuck


def test_routes_of_known_ops():
    assert op_table.eager_route(aten.add.Tensor) == "native"
    assert op_table.compile_route(aten.add.Tensor) == "fused"
    assert op_table.eager_route(aten.cumsum.default) == "native"
    assert op_table.compile_route(aten.cumsum.default) == "library"
    # A structured op whose out= form ember implements is native through it.
    assert op_table.eager_route(aten.index.Tensor) == "native"
    assert op_table.eager_route(aten.multilabel_margin_loss_forward.default) == "fallback"
    assert op_table.compile_route(aten.multilabel_margin_loss_forward.default) == "none"
    files = {r[0]: r[2] for r in op_table.rows()}
    assert files["aten.cumsum.default"] == "register_index.cc"


def test_generated_doc_is_current(tmp_path):
    # In a fresh interpreter, as the docs are generated: what other tests import (Inductor,
    # libraries) can add decompositions to the process and so change the table.
    out = tmp_path / "op_table.md"
    r = subprocess.run([sys.executable, "-m", "torch_ember.cli", "ops", "--markdown", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    with open(os.path.join(ROOT, "docs", "op_table.md")) as f:
        assert f.read() == out.read_text(), "docs/op_table.md is stale: run `ember ops --markdown docs/op_table.md`"
