"""Per-graph compile records: `torch_ember.compile_stats()` and the EMBER_LOG=compile line.

Phases: `capture_ms` is the time from the backend call to the start of lowering (Dynamo has
already traced by then; this covers AOTAutograd's joint trace, partitioning and
decompositions), `fx_to_ir_ms` is the FX -> Ember IR translation in Python, and the rest are the
C++ pipeline's phases (verify, lower, optimize, codegen, jit, load)."""
import sys
import threading
from dataclasses import asdict, dataclass, field

from . import settings

_lock = threading.Lock()
_records: list = []


@dataclass
class CompileRecord:
    name: str
    kind: str  # "fw", "bw" or "inference"
    capture_ms: float = 0.0
    fx_to_ir_ms: float = 0.0
    verify_ms: float = 0.0
    lower_ms: float = 0.0
    optimize_ms: float = 0.0
    codegen_ms: float = 0.0
    jit_ms: float = 0.0
    load_ms: float = 0.0
    compile_ms: float = 0.0  # the C++ pipeline, all phases
    total_ms: float = 0.0  # capture + translation + compile
    fx_nodes: int = 0
    nodes: int = 0
    nodes_fused: int = 0
    kernels: int = 0
    library_calls: int = 0
    partitions: int = 0  # Ember-compiled pieces of this graph
    cache_hit: bool = False  # every partition hit the persistent cache
    cache_key: str = ""
    library_ops: list = field(default_factory=list)  # (op, line) run by their eager ember kernel
    eager_ops: list = field(default_factory=list)  # (op, line) run through the CPU fallback
    recompile_reason: str = ""  # why this graph was compiled again (new input sizes, ...)
    background: bool = False  # compiled on a thread while the first calls ran eagerly
    eager_calls: int = 0  # calls that ran eagerly before the compiled graph took over

    def as_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        eager = f" library_steps={len(self.library_ops)}" if self.library_ops else ""
        eager += f" eager_ops={len(self.eager_ops)}" if self.eager_ops else ""
        eager += f" recompile=({self.recompile_reason})" if self.recompile_reason else ""
        eager += " background" if self.background else ""
        return (f"ember compile {self.name} [{self.kind}] {self.total_ms:.1f} ms "
                f"(capture {self.capture_ms:.1f}, fx->ir {self.fx_to_ir_ms:.1f}, "
                f"compile {self.compile_ms:.1f}: codegen {self.codegen_ms:.1f}, jit {self.jit_ms:.1f}, "
                f"load {self.load_ms:.1f}) nodes={self.nodes} fused={self.nodes_fused} "
                f"kernels={self.kernels} library={self.library_calls} "
                f"cache={'hit' if self.cache_hit else 'miss'}{eager}")

    def add_compile(self, stats: dict) -> None:
        """Accumulates one C++ compile (a partition) into this record."""
        for phase in ("verify_ms", "lower_ms", "optimize_ms", "codegen_ms", "jit_ms", "load_ms"):
            setattr(self, phase, getattr(self, phase) + stats[phase])
        self.compile_ms += stats["total_ms"]
        for k in ("nodes", "nodes_fused", "kernels", "library_calls"):
            setattr(self, k, getattr(self, k) + stats[k])
        self.cache_hit = stats["cache_hit"] if self.partitions == 0 else (self.cache_hit and stats["cache_hit"])
        self.cache_key = self.cache_key or stats["cache_key"]
        self.partitions += 1


def record(rec: CompileRecord) -> None:
    with _lock:
        _records.append(rec)
    if settings.log_compiles():
        print(rec.line(), file=sys.stderr, flush=True)


def compile_stats() -> list:
    """One dict per compiled graph (forward, backward or inference), oldest first."""
    with _lock:
        return [r.as_dict() for r in _records]


def reset_compile_stats() -> None:
    with _lock:
        _records.clear()
