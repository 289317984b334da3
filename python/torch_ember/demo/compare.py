"""The demo's closing side-by-side: the demo model trained in Ember eager and in Ember compiled
(torch.compile(backend="ember"), fresh compile cache), each in a new process through
`ember bench train`, so time to first step is measured from a cold start. Prints both loss
curves over the same steps (parity), time to first step, steady tokens/s, fallbacks, and where
the run was stored in the knowledge base."""
from __future__ import annotations

MODES = ("ember_eager", "ember_compiled_cold")
# Compiled kernels fuse and reorder float math; over a few AdamW steps the losses stay this close.
TOLERANCE = {"float32": 2e-3, "bfloat16": 5e-2}


def side_by_side(steps: int = 8, dtype: str = "float32") -> dict:
    from ..bench import train as bench

    print(f"\nEmber eager vs Ember compiled: {steps} steps each, each in a new process "
          "(ember bench train --only demo) ...", flush=True)
    data = bench.run(["demo"], [dtype], list(MODES), steps, progress=False)
    by_mode = {r["mode"]: r for r in data["results"]}
    eager, comp = by_mode.get("ember_eager", {}), by_mode.get("ember_compiled_cold", {})
    for r in (eager, comp):
        if r.get("status") != "ok":
            print(f"{r.get('mode')}: {r.get('status')}: {r.get('error', '')}")
    le = (eager.get("completion") or {}).get("losses") or []
    lc = (comp.get("completion") or {}).get("losses") or []
    if le and lc:
        print(f"{'step':>4}  {'eager loss':>10}  {'compiled loss':>13}")
        for i, (a, b) in enumerate(zip(le, lc), 1):
            print(f"{i:>4}  {a:>10.4f}  {b:>13.4f}")
        worst = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(le, lc))
        ok = worst <= TOLERANCE[dtype]
        print(f"parity: largest relative loss difference {worst:.2e} over {min(len(le), len(lc))} steps "
              f"({'within' if ok else 'OUTSIDE'} {TOLERANCE[dtype]:g})")
        data["eager_vs_compiled"] = {"max_rel_diff": worst, "tolerance": TOLERANCE[dtype], "ok": ok}
    print(f"{'':<20} {'time to first step':>18}  {'steady tokens/s':>15}  fallbacks")
    for label, r in (("Ember eager", eager), ("Ember compiled", comp)):
        if r.get("status") != "ok":
            continue
        p, e, c = r["preparation"], r["execution"], r["completion"]
        first = f"{p['first_step_s']:.1f} s"
        if "compile_s" in p:
            first += f" ({p['compile_s']:.1f} compile)"
        fb = ", ".join(f"{op} ({n})" for op, n in c.get("fallback_ops", {}).items()) or "none"
        print(f"{label:<20} {first:>22}  {e['per_s']:>15.0f}  {fb}")
    print("time to first step counts from process start: imports, model build and the first step "
          "(for compiled, its compile); tokens/s is the median over the steps after the first two")
    from ..kb import db_path

    if data.get("kb_run"):
        print(f"stored in the knowledge base: run {data['kb_run']} in {db_path()} "
              f"(ember kb list; ember kb report --out DIR)")
    else:
        print("not stored in the knowledge base (EMBER_KB=off, or running under pytest)")
    return data
