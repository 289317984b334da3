"""The callable a compiled graph becomes: allocate outputs, queue the executable on the current
ember stream, rebuild the FX outputs (aliases replayed as eager views).

Everything that does not depend on the call's tensors is computed once, at compile time; a call
is one stride check per input, one allocation per output and one `exe.run`. An input that
arrives with other strides than the graph was compiled for (a backward graph fed by a forward
output that ember made contiguous, for example) gets an executable of its own for that layout,
compiled once and kept."""
import torch

from .fx_to_ir import Translation


class CompiledGraph:
    def __init__(self, translation: Translation, exe, device: torch.device, recompile, name: str = ""):
        # (input strides) -> (Translation, exe); None for a graph loaded by a warm start, which
        # has no FX graph to translate again: inputs in other strides are copied into the
        # compiled ones instead.
        self._recompile = recompile
        self._device = device
        self._name = name
        self._copied = []
        self._variants = {}
        self._install(translation, exe)
        self._base = (translation, exe)

    # --- warm start (warm.py): what rebuilds this callable in another process -------------
    def cache_state(self) -> dict:
        """The executable's compile-cache key, the IR build tape that recreates it on a cache
        miss, and the call metadata; no FX graph."""
        tr, exe = self._base
        return {
            "name": self._name, "device": self._device.index, "cache_key": tr.cache_key,
            "tape": tr.builder.g.tape if exe is not None else None,
            "meta": (tr.input_positions, tr.input_strides, tr.input_to_device, tr.input_dtypes,
                     [_encode_result(r) for r in tr.results], tr.tuple_output, tr.num_exe_outputs,
                     tr.output_layouts, tr.cpu_results),
        }

    @classmethod
    def from_cache_state(cls, state: dict, rec=None) -> "CompiledGraph":
        from .. import _C
        from . import settings
        from .builder import replay

        positions, strides, to_device, dtypes, results, tuple_output, n_out, *rest = state["meta"]
        layouts = rest[0] if rest else {}  # an entry written before layouts were kept
        cpu_results = rest[1] if len(rest) > 1 else []
        tr = Translation(None, positions, [tuple(s) for s in strides], to_device, dtypes,
                         [_decode_result(r) for r in results], tuple_output, n_out,
                         cache_key=state["cache_key"], output_layouts=layouts, cpu_results=cpu_results)
        exe = None
        if state["tape"] is not None:
            cache = settings.cache_dir()
            exe, stats = _C._compile(replay(state["tape"]), state["name"], cache, bool(cache))
            if rec is not None:
                rec.add_compile(stats)
            if stats["warning"]:
                import warnings
                warnings.warn(f"ember compile cache: {stats['warning']}", RuntimeWarning, stacklevel=2)
        return cls(tr, exe, torch.device("ember", state["device"]), None, state["name"])

    def _install(self, tr: Translation, exe):
        self.tr, self.exe = tr, exe
        self._positions = tr.input_positions
        self._strides = tr.input_strides
        self._dtypes = tr.input_dtypes
        self._move = [i for i, m in enumerate(tr.input_to_device) if m]
        self._alloc = []
        self._permuted = {}  # exe output index -> the order the executable writes it in
        self._written = set()  # IR inputs the executable writes in place
        if exe is not None:
            for i in range(exe.num_outputs):
                dtype, sizes, strides, alias = exe.output_info(i)
                perm = tr.output_layouts.get(i)
                if alias >= 0:
                    self._alloc.append(None)
                    self._written.add(alias)
                elif perm is None:
                    self._alloc.append((tuple(sizes), tuple(strides), dtype))
                else:
                    # Written in `perm` order: the caller's tensor has the traced layout and the
                    # executable writes through its permutation, which is row-major.
                    self._permuted[i] = perm
                    shape, layout = [0] * len(perm), [0] * len(perm)
                    for j, d in enumerate(perm):
                        shape[d], layout[d] = sizes[j], strides[j]
                    self._alloc.append((tuple(shape), tuple(layout), dtype))
        self._cpu_results = tr.cpu_results
        self._simple = all(r[0] == "exe" for r in tr.results) and not tr.cpu_results
        # Executable outputs that views are replayed on, with the strides they were traced with.
        self._restride = {r[1][1]: r[3] for r in tr.results
                          if r[0] == "view" and len(r) > 3 and r[3] is not None and r[1][0] == "exe"}
        self._exe_index = [r[1] for r in tr.results] if self._simple else None
        self._variants.setdefault(tuple(self._strides), (tr, exe))

    def _outputs(self):
        dev = self._device
        return [None if a is None else torch.empty_strided(a[0], a[1], dtype=a[2], device=dev)
                for a in self._alloc]

    def __call__(self, *args):
        ins = [args[i] for i in self._positions]
        if self._written and not torch.is_inference_mode_enabled():
            for i in self._written:
                if ins[i].is_inference():
                    # The check eager mode's in-place op makes (the executable writes the
                    # memory itself, so no op of the input goes through the dispatcher).
                    raise RuntimeError(
                        "Inplace update to inference tensor outside InferenceMode is not allowed.You can make a "
                        "clone to get a normal tensor before doing inplace update.See "
                        "https://github.com/pytorch/rfcs/pull/17 for more details.")
        copied = []
        for i in self._move:
            # A CPU input (an optimizer's step count) runs from a device copy; one the graph
            # writes in place gets the result back.
            moved = ins[i].to(self._device)
            copied.append((i, ins[i], moved))
            ins[i] = moved
        for i, t in enumerate(ins):
            # A lazily negated or conjugated view (what `z.conj().imag` is, in eager mode and
            # from a library step alike) holds the values before the negation; the executable
            # reads memory, so it gets the resolved values (written back if written in place).
            if t.is_neg() or t.is_conj():
                ins[i] = t.resolve_conj().resolve_neg()
                copied.append((i, t, ins[i]))
        if any(t.dtype != d for t, d in zip(ins, self._dtypes)):
            # An eager step whose result dtype differs from what its meta function promised
            # (native_batch_norm's statistics stay bfloat16 on the device, the meta function says
            # float32) hands the graph another dtype than it was compiled for. The executable
            # would read the bytes as the traced dtype, so the input is cast to it: exact for a
            # widening, and the traced program's own precision otherwise. An input the graph
            # writes in place gets the result back.
            for i, (t, d) in enumerate(zip(ins, self._dtypes)):
                if t.dtype != d:
                    ins[i] = t.to(d)
                    copied.append((i, t, ins[i]))
        strides = [t.stride() for t in ins]
        if strides != self._strides:
            self._copied = copied
            self._use_variant(ins, strides)
            copied = self._copied
        if copied:
            self._copied = copied
            return self._run_copied(args, ins)
        return self._run(args, ins)

    def _run_copied(self, args, ins):
        copied, self._copied = self._copied, []
        res = self._run(args, ins)
        # An input the graph writes in place gets the result back (newest copy first: a cast
        # input may have been copied again into the traced strides).
        for i, orig, copy in reversed(copied):
            if i in self._written:
                orig.copy_(copy)
        return res

    def _run(self, args, ins):
        outs = self._outputs() if self.exe is not None else []
        if self.exe is not None:
            if self._permuted:
                bufs = list(outs)
                for i, perm in self._permuted.items():
                    bufs[i] = outs[i].permute(perm)
                self.exe.run(ins, bufs)
            else:
                self.exe.run(ins, outs)
        for i, strides in self._restride.items():
            # The executable writes contiguous results; a view traced on a base with other
            # strides (a transposed result) is replayed on a copy in those strides, which also
            # stands for the base wherever it is returned, so aliasing holds.
            o = outs[i]
            if not _same_layout(o, strides):
                outs[i] = torch.empty_strided(o.shape, strides, dtype=o.dtype, device=o.device).copy_(o)
        if self._simple:
            res = [outs[i] for i in self._exe_index]
        else:
            res = [self._result(r, args, outs) for r in self.tr.results]
            for i in self._cpu_results:
                res[i] = res[i].cpu()  # eager mode's device for what CPU scalars alone compute
        return res if self.tr.tuple_output else res[0]

    def _use_variant(self, ins, strides):
        if all(_same_layout(t, s) for t, s in zip(ins, self._strides)):
            return
        key = tuple(tuple(s) for s in strides)
        if key not in self._variants:
            if self._recompile is None:
                return self._copy_to_compiled_strides(ins)
            self._variants[key] = self._recompile(list(key))
        self._install(*self._variants[key])

    def _copy_to_compiled_strides(self, ins):
        """Copies of the inputs in the strides the executable was compiled for (in place)."""
        for i, (t, s) in enumerate(zip(ins, self._strides)):
            if not _same_layout(t, s):
                ins[i] = torch.empty_strided(t.shape, s, dtype=t.dtype, device=t.device).copy_(t)
                self._copied.append((i, t, ins[i]))

    def _result(self, r, args, outs):
        kind = r[0]
        if kind == "exe":
            return outs[r[1]]
        if kind == "arg":
            return args[r[1]]
        if kind == "const":
            return r[1]
        base = self._result(r[1], args, outs)
        strides = r[3] if len(r) > 3 else None
        if strides is not None and r[1][0] in ("arg", "exe") and not _same_layout(base, strides):
            # A graph input that arrives with other strides than it was traced with (a backward
            # graph's incoming gradient, say), or an executable output that stands for two traced
            # nodes with different layouts (a value and its clone in another memory format; _run
            # restrided it for one of them): the traced views may not apply to its layout, so
            # they are taken of a copy in the traced layout, as reshape would.
            base = torch.empty_strided(base.shape, strides, dtype=base.dtype, device=base.device).copy_(base)
        for target, vargs, vkwargs in r[2]:
            base = target(base, *vargs, **vkwargs)
        return base


def _encode_result(r):
    """A results entry with its view ops as names (OpOverloads do not pickle)."""
    if r[0] != "view":
        return r
    replay = [(str(t) if isinstance(t, torch._ops.OpOverload) else t, a, k) for t, a, k in r[2]]
    return ("view", _encode_result(r[1]), replay, *r[3:])


def _op(name):
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def _decode_result(r):
    if r[0] != "view":
        return r
    replay = [(_op(t) if isinstance(t, str) else t, a, k) for t, a, k in r[2]]
    return ("view", _decode_result(r[1]), replay, *r[3:])


def _same_layout(t: torch.Tensor, strides) -> bool:
    """Strides differ only in dims of size <= 1, where they address nothing."""
    return all(n <= 1 or a == e for n, a, e in zip(t.shape, t.stride(), strides))


def boxed(fn):
    """AOTAutograd calls compiled graphs boxed: one list argument, which the callee clears so
    that inputs can be freed as soon as possible."""
    def run(args):
        out = fn(*args)
        args.clear()
        return out
    run._boxed_call = True
    return run
