"""Triton's compiler interface for Ember: the stages that turn a `@triton.jit` function into a
shared object the host runs.

Triton calls `BaseBackend.add_stages` to learn the pipeline. Ember keeps Triton's frontend and its
TTIR passes (inliner, canonicalizer, combine, CSE, loop unrolling) — the same ones the NVIDIA
backend runs first — then replaces everything GPU-specific with two stages of its own: `cpp`
(TTIR → C++, codegen.py) and `so` (C++ → shared object through the on-disk cache, cache.py).
Triton stores each stage's output in its own cache as well, so a warm process skips all of it.

This module must hold exactly one concrete BaseBackend subclass: Triton's backend discovery
looks the class up by scanning the module.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from triton.backends.compiler import BaseBackend, GPUTarget, Language

TARGET = GPUTarget("ember", "host", 1)


@dataclass(frozen=True)
class EmberOptions:
    num_warps: int = 4
    num_ctas: int = 1
    num_stages: int = 1
    warp_size: int = 1
    maxnreg: Optional[int] = None
    ir_override: Optional[str] = None
    enable_fp_fusion: bool = False
    launch_cooperative_grid: bool = False
    launch_pdl: bool = False
    supported_fp8_dtypes: Tuple[str, ...] = ()
    deprecated_fp8_dot_operand_dtypes: Tuple[str, ...] = ()
    # Dots run in full fp32 on the host, whatever precision a kernel asks for.
    default_dot_input_precision: str = "ieee"
    allowed_dot_input_precisions: Tuple[str, ...] = ("ieee", "tf32", "tf32x3", "bf16x3", "bf16x6")
    max_num_imprecise_acc_default: int = 0
    extern_libs: Optional[tuple] = None
    debug: bool = False
    sanitize_overflow: bool = False
    backend_name: str = "ember"
    arch: str = "host"
    instrumentation_mode: str = ""
    fpsan_homomorphic_casts: bool = False

    def hash(self) -> str:
        key = "_".join(f"{k}-{v}" for k, v in sorted(self.__dict__.items()))
        return hashlib.sha256(key.encode()).hexdigest()


def _min_dot_size(lhs_type, rhs_type):
    return (1, 1, 1)


class EmberBackend(BaseBackend):
    binary_ext = "so"

    @staticmethod
    def supports_target(target: GPUTarget):
        return target.backend == "ember"

    def __init__(self, target: GPUTarget) -> None:
        super().__init__(target)
        self.binary_ext = "so"

    def hash(self) -> str:
        from .cache import CXX_FLAGS, cpu_flags, cxx, cxx_version
        from .codegen import codegen_version
        # Triton's own cache keys compiled kernels by this: it covers everything our cache key
        # (cache.cache_key) does, so a changed translator or prelude never serves a stale binary.
        key = f"ember-{codegen_version()}-{' '.join(CXX_FLAGS)}-{cxx_version(cxx())}-{cpu_flags()}"
        return hashlib.sha256(key.encode()).hexdigest()

    def parse_options(self, opts: dict) -> Any:
        args = {k: opts[k] for k in EmberOptions.__dataclass_fields__ if k in opts and opts[k] is not None}
        args.pop("sanitize_overflow", None)
        if "extern_libs" in args and isinstance(args["extern_libs"], dict):
            args["extern_libs"] = tuple(args["extern_libs"].items())
        return EmberOptions(**args)

    def pack_metadata(self, metadata):
        return (metadata.num_warps, metadata.num_ctas, metadata.shared)

    def get_codegen_implementation(self, options):
        return {"min_dot_size": _min_dot_size}

    def get_module_map(self) -> Dict[str, Any]:
        # libdevice calls lower to `tt.extern_elementwise` with the CUDA symbol names, which the
        # code generator maps to the C++ math library.
        from triton.language.extra.cuda import libdevice
        return {"triton.language.extra.libdevice": libdevice}

    def load_dialects(self, ctx):
        pass

    @staticmethod
    def make_ttir(mod, metadata, options):
        from triton._C.libtriton import ir, passes
        pm = ir.pass_manager(mod.context)
        pm.enable_debug()
        passes.common.add_inliner(pm)
        passes.ttir.add_rewrite_tensor_descriptor_to_pointer(pm)
        passes.common.add_canonicalizer(pm)
        passes.ttir.add_combine(pm)
        passes.ttir.add_reorder_broadcast(pm)
        passes.common.add_cse(pm)
        passes.common.add_symbol_dce(pm)
        passes.ttir.add_loop_unroll(pm)
        pm.run(mod, "make_ttir")
        return mod

    @staticmethod
    def make_cpp(mod, metadata, options):
        from .cache import cache_key
        from .codegen import translate
        source, name = translate(str(mod))
        metadata["name"] = name
        metadata["shared"] = 0
        metadata["ember_key"] = cache_key(mod.str_nodebug())
        return source

    @staticmethod
    def make_so(src, metadata, options):
        from .cache import build
        return build(src, metadata["ember_key"], metadata["name"])

    def add_stages(self, stages, options, language=Language.TRITON):
        if language != Language.TRITON:
            raise NotImplementedError("the Ember Triton backend compiles Triton kernels, not Gluon")
        stages["ttir"] = lambda src, metadata: self.make_ttir(src, metadata, options)
        stages["cpp"] = lambda src, metadata: self.make_cpp(src, metadata, options)
        stages["so"] = lambda src, metadata: self.make_so(src, metadata, options)
