"""Known failure patterns: a failure message (and the runner's category, where it gave one) in,
a short explanation of what it usually means and what to do about it out.

The knowledge base stores the match with every failure, so `ember kb search` and the HTML report
can say "this is the missing-kernel case" instead of leaving each reader to recognise it. The
table is ordered: the first pattern that matches wins, so the specific ones come first (Ember's
strict-compile refusal before the generic "no ember kernel", a forbidden fallback before both).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

OP_TABLE = "docs/op_table.md"


@dataclass(frozen=True)
class Explanation:
    key: str          # a stable name, stored with the failure and used to group failures
    explanation: str  # what the failure usually means
    advice: str       # what to do about it

    def text(self) -> str:
        return f"{self.explanation}; {self.advice}"


@dataclass(frozen=True)
class Pattern:
    key: str
    regex: re.Pattern
    explanation: str
    advice: str
    categories: tuple = ()  # runner categories that mean this even when the message is empty
    # The category names the stage that failed (the build, the clock), so it decides before any
    # message pattern: a config that transformers cannot build may well say "not implemented".
    stage: bool = False

    def matches(self, message: str, category: str) -> bool:
        return bool(self.regex.search(message)) or (bool(category) and category in self.categories)


def _p(key, regex, explanation, advice, categories=(), stage=False) -> Pattern:
    return Pattern(key, re.compile(regex, re.IGNORECASE), explanation, advice, tuple(categories), stage)


PATTERNS: tuple[Pattern, ...] = (
    _p("fallback-forbidden", r"EMBER_FALLBACK=error forbids",
       "an op with no ember kernel was called while EMBER_FALLBACK=error forbids the CPU fallback",
       f"unset EMBER_FALLBACK (or set it to warn/silent) to let it fall back, or add the kernel: "
       f"see {OP_TABLE}"),
    _p("compile-refused", r"ember compiler cannot translate",
       "a strict torch.compile(backend='ember') met an op the compiler cannot lower; eagerly it "
       "runs on the CPU through the fallback",
       f"a native kernel or lowering is missing: see {OP_TABLE}; meanwhile compile with "
       f"options={{'fallback': 'eager'}}"),
    _p("missing-kernel", r"cannot translate|has no ember kernel|no ember kernel",
       "the op runs on the CPU through the fallback; a native kernel is missing",
       f"see {OP_TABLE} for the op's eager and compiled route", ["unsupported op"]),
    _p("dtype-refused", r"dtype \S+ is not supported on the ember device|has unsupported dtype|"
                        r"not supported on ember for dtype",
       "ember refuses this dtype (no storage or kernel support for it on the device)",
       "use a supported dtype (float32, bfloat16, ints, bool), or add the dtype to the kernel"),
    _p("cpu-dtype-missing", r"not implemented for '\w+'",
       "PyTorch's own kernel lacks this dtype (often the CPU kernel, reached through the fallback)",
       "the same call fails on the CPU; not an ember kernel bug unless ember's dtype support differs"),
    _p("device-gate", r"only supported on CUDA|only supports CUDA|requires CUDA|"
                      r"Torch not compiled with CUDA|CUDA is not available|only (?:available|implemented) "
                      r"(?:for|on) (?:CUDA|cuda)",
       "PyTorch gates this code path on the device type (CUDA only); ember's kernels never ran",
       "check for a device-generic (privateuse1) path in PyTorch; otherwise the test does not apply"),
    _p("dynamo-capture", r"Dynamo cannot capture|graph break|torch\._dynamo\.exc\.Unsupported|"
                         r"Dynamo handed no graph",
       "Dynamo could not capture the call in one graph; nothing about ember's compiler was tested",
       "a PyTorch-side limitation: run it eagerly, or compile without fullgraph=True"),
    _p("pytorch-compile", r"PyTorch's compile stack fails on it too|aot_eager",
       "the call fails through PyTorch's own compile stack (aot_eager) as well",
       "not ember's compiler: report upstream or skip the case"),
    _p("could-not-build", r"could not build",
       "transformers could not build the model from the reduced config (or make its inputs)",
       "fix the reduced config in python/torch_ember/sweep/tiny_hf.py; not an ember failure",
       ["could not build"], stage=True),
    _p("out-of-memory", r"out of memory|OutOfMemoryError|Cannot allocate memory|std::bad_alloc|"
                        r"\bMemoryError\b|signal 9\b|exited with -9\b",
       "the process ran out of memory (host RAM or ember's allocator), or was killed for it",
       "shrink the shapes or batch, run fewer jobs at once, and check torch.ember.memory_summary() "
       "for leaks"),
    _p("timeout", r"no result within|timed out|\btimeout\b|nothing was logged for",
       "no result within the time limit: a hang, a deadlock, or just too slow",
       "rerun the single item alone with a larger time limit; if it still stops, attach a debugger "
       "(gdb -p, py-spy dump) to see where", ["timeout", "hang"], stage=True),
    _p("crash", r"Segmentation fault|SIGSEGV|SIGABRT|SIGBUS|core dumped|\(signal \d+\)|"
                r"process exited with|Fatal Python error",
       "the process died (a signal or an abort), most likely inside a native kernel",
       "rerun the item in-process (--no-isolate) under gdb, or with faulthandler, for the stack",
       ["crash"]),
    _p("wrong-values", r"values differ from CPU|Tensor-likes are not close|Mismatched elements|"
                       r"Scalars are not (?:close|equal)|not equal",
       "ember computed values that differ from the CPU beyond the tolerance",
       "replay the failing sample; look at accumulation order and precision (bf16 or reduced "
       "accumulators) in the kernel", ["wrong values", "wrong"]),
    _p("ember-unsupported", r"ember: not supported|ember: .* does not support",
       "ember's runtime refused an argument combination it does not implement",
       "the message names the unsupported argument; use another path or extend the kernel"),
    _p("compile-error", r"BackendCompilerFailed|CompileError",
       "ember's compiler failed on the graph (not a refusal of a known op)",
       "rerun with the single model or op and read the compiler's message; EMBER_* debug variables "
       "dump the graph", ["compile error", "compile-error"]),
)


def explain(message: str | None, category: str | None = None) -> Explanation | None:
    """The first known pattern that `message` (or the runner's `category`) matches, or None."""
    message, category = message or "", (category or "").strip()
    for p in PATTERNS:
        if p.stage and category in p.categories:
            return Explanation(p.key, p.explanation, p.advice)
    for p in PATTERNS:
        if p.matches(message, category):
            return Explanation(p.key, p.explanation, p.advice)
    return None


def known_keys() -> list[str]:
    return [p.key for p in PATTERNS]
