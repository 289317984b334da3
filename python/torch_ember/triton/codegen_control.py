"""TTIR op handlers for control flow: scf.for and scf.if with their yields, the function's
return, and the unstructured branches (cf.br, cf.cond_br) that an early return inside an `if`
becomes; also the barrier and the device-side print and assert Ember refuses."""
from __future__ import annotations

import re

from .codegen import (
    Lazy, Op, Translator, Ty, V, _SHARED_EXPR_CHARS, _SIZE, costly, ctype, find_top, handles, parse_type, split_top,
)


def _local_copy(t, name: str, ty, src) -> V:
    """A new local named after `name` holding a copy of `src` (a tile buffer or a scalar): loop
    carries and block arguments are written in place, so they never alias their initial value."""
    if ty.is_tensor:
        b = t.alloc(ty, name)
        t.emit(f"std::memmove({b.name}, {src.name}, {ty.numel * _SIZE[ty.elem]});")
    else:
        b = V(t.fresh(name), ty)
        t.emit(f"{ctype(ty)} {b.name} = {src.name};")
    return b


class _OffsetCarry:
    """A loop-carried pointer block that every iteration advances by one scalar (`p += BLOCK *
    stride`, the pattern of every tiled Triton loop): carried as the initial block plus a scalar
    element offset, so the body reads `init + off` lazily (the loads see the pointers' affine
    structure) and the yield adds a scalar instead of rewriting the whole block."""

    def __init__(self, off: str, step: str):
        self.off = off
        self.step = step


def _definitions(t: Translator) -> dict:
    """Every op of the function by the SSA names it defines (computed once per kernel)."""
    if getattr(t, "_defs", None) is None:
        defs = {}

        def walk(ops):
            for o in ops:
                for r in o.results:
                    defs[r] = o
                for region in o.regions:
                    for blk in region:
                        walk(blk.ops)

        walk(t.func.body.ops)
        for blk in t.func.blocks:
            walk(blk.ops)
        t._defs = defs
    return t._defs


def _offset_carries(t: Translator, body_ops, carried: list[str]) -> dict[int, str]:
    """For each carried value (by position) that the loop's yield advances with
    `tt.addptr %arg, tt.splat %scalar` or `tt.addptr %arg, dense<N>`, the scalar's SSA name or
    the integer literal."""
    if not body_ops or body_ops[-1].name != "scf.yield":
        return {}
    defs = _definitions(t)
    found = {}
    for k, y in enumerate(body_ops[-1].operands()):
        if k >= len(carried):
            break
        add = defs.get(y)
        if add is None or add.name != "tt.addptr":
            continue
        ops = add.operands()
        if len(ops) != 2 or ops[0] != carried[k]:
            continue
        step = defs.get(ops[1])
        if step is not None and step.name == "tt.splat":
            found[k] = step.operands()[0]
        elif step is not None and step.name == "arith.constant":
            lit = re.match(r"^dense<(-?\d+)>", step.body)
            if lit:
                found[k] = lit.group(1)
    return found


@handles("scf.for")
def _for(t: Translator, op: Op):
    m = re.match(r"^(%\S+) = (%\S+) to (%\S+) step (%\S+)(?:\s+iter_args\((.*)\)\s*->\s*\((.*)\))?\s*(?::\s*(\S+))?$",
                 op.body)
    if not m:
        t.unsupported(op, f"cannot read loop header {op.body!r}")
    iv, lb, ub, step = m.group(1), m.group(2), m.group(3), m.group(4)
    ivty = Ty(m.group(7) or "index")
    lbv, ubv, stv = (t.get(x, op) for x in (lb, ub, step))
    bufs = []
    blocks = op.regions[0]
    if m.group(5):
        parts = [[x.strip() for x in part.split("=")] for part in split_top(m.group(5))]
        offsets = _offset_carries(t, blocks[0].ops, [arg for arg, _ in parts])
        for k, ((arg, init), oty) in enumerate(zip(parts, split_top(m.group(6)))):
            ty = parse_type(oty)
            if k in offsets and ty.is_tensor and ty.elem == "ptr":
                start = t.get_lazy(init, op)
                e = start.raw("_i")
                if isinstance(start, Lazy) and (costly(e) or len(e) > _SHARED_EXPR_CHARS):
                    start = t.get(init, op)  # computed once, not in every iteration's loads
                off = t.fresh("off")
                t.emit(f"int64_t {off} = 0;")
                value = Lazy(ty, lambda i, start=start, off=off: f"{start.raw(i)} + {off}")
                bufs.append((arg, value, _OffsetCarry(off, offsets[k])))
            else:
                b = _local_copy(t, arg, ty, t.get(init, op))
                bufs.append((arg, b, b))
    ivn = t.fresh(iv)
    c = ctype(ivty)
    t.emit(f"for ({c} {ivn} = {lbv.name}; {ivn} < ({c}){ubv.name}; {ivn} += ({c}){stv.name}) {{")
    t.depth += 1
    saved = dict(t.env)
    t.env[iv] = V(ivn, ivty)
    for arg, b, _ in bufs:
        t.env[arg] = b
    t.yield_stack.append(("for", [target for _, _, target in bufs]))
    t.block(blocks[0].ops)
    t.yield_stack.pop()
    t.env = saved
    t.depth -= 1
    t.emit("}")
    for r, (_, b, _) in zip(op.results, bufs):
        t.env[r] = b


@handles("scf.if")
def _if(t: Translator, op: Op):
    cond_txt = op.body.split("->")[0]
    (cond,) = (t.get(x, op) for x in op.operands(cond_txt))
    outs = []
    if "->" in op.body:
        tys = op.body.split("->", 1)[1].strip()
        if tys.startswith("(") and tys.endswith(")"):
            tys = tys[1:-1]
        for r, tyt in zip(op.results, split_top(tys)):
            ty = parse_type(tyt)
            if ty.is_tensor:
                b = t.alloc(ty, r)
            else:
                b = V(t.fresh(r), ty)
                t.emit(f"{ctype(ty)} {b.name}{{}};")
            outs.append(b)
    for k, blocks in enumerate(op.regions):
        t.emit(f"if ({cond.name}) {{" if k == 0 else "else {")
        t.depth += 1
        saved = dict(t.env)
        t.yield_stack.append(("if", outs))
        t.block(blocks[0].ops)
        t.yield_stack.pop()
        t.env = saved
        t.depth -= 1
        t.emit("}")
    for r, b in zip(op.results, outs):
        t.env[r] = b


@handles("scf.yield")
def _yield(t: Translator, op: Op):
    kind, targets = t.yield_stack[-1]
    # An offset-carried block's value is not stored: its yield adds the step to the offset.
    vals = [None if isinstance(b, _OffsetCarry) else t.get(x, op) for x, b in zip(op.operands(), targets)]
    names = {b.name for b in targets if not isinstance(b, _OffsetCarry)}
    # Yielded values can alias other iteration buffers (a loop that swaps two carried blocks):
    # copy those through temporaries first. Every yielded value is read here, before any carried
    # buffer or offset changes.
    staged = []
    for v, b in zip(vals, targets):
        if isinstance(b, _OffsetCarry):
            tn = t.fresh("stage")
            step = b.step if not b.step.startswith("%") else t.get(b.step, op).name
            t.emit(f"int64_t {tn} = {b.off} + (int64_t)({step});")
            staged.append(V(tn, Ty("i64")))
        elif v.ty.is_tensor and v.name in names and v.name != b.name:
            tmp = t.alloc(v.ty, "stage")
            t.emit(f"std::memcpy({tmp.name}, {v.name}, {v.ty.numel * _SIZE[v.ty.elem]});")
            staged.append(tmp)
        elif not v.ty.is_tensor:
            tn = t.fresh("stage")
            t.emit(f"{ctype(v.ty)} {tn} = {v.name};")
            staged.append(V(tn, v.ty))
        else:
            staged.append(v)
    for v, b in zip(staged, targets):
        if isinstance(b, _OffsetCarry):
            t.emit(f"{b.off} = {v.name};")
        elif b.ty.is_tensor:
            if v.name != b.name:
                t.emit(f"std::memmove({b.name}, {v.name}, {b.ty.numel * _SIZE[b.ty.elem]});")
        else:
            t.emit(f"{b.name} = {v.name};")


@handles("tt.return")
def _return(t: Translator, op: Op):
    t.emit("return;")


# Branches between the blocks of a function body: Triton emits them for an early `return` inside
# an `if` (the rest of the kernel becomes the other branch). Every path through such a body ends
# in `tt.return`, so each branch is emitted as a C++ block holding its target's code (nested
# inside the branching block, so the values defined before the branch stay in scope); a block
# reached along several paths is emitted once per path. A branch back to a block on the current
# path (a loop built from branches, which Triton does not produce) is refused.
_MAX_INLINED_BLOCKS = 64


def _branch_target(t: Translator, op: Op, text: str):
    text = text.strip()
    m = re.match(r"^(\^[\w]+)(?:\((.*)\))?$", text)
    if not m:
        t.unsupported(op, f"cannot read branch target {text!r}")
    label, args = m.group(1), m.group(2) or ""
    k = find_top(args, " : ")
    names = op.operands(args[:k] if k >= 0 else args)
    return label, [t.get(x, op) for x in names]


def _jump(t: Translator, op: Op, label: str, vals: list):
    block = t.blocks.get(label)
    if block is None:
        t.unsupported(op, f"branch to unknown block {label}")
    if label in t.branch_path:
        t.unsupported(op, f"a loop made of branches (back to {label})")
    t.inlined += 1
    if t.inlined > _MAX_INLINED_BLOCKS:
        t.unsupported(op, f"more than {_MAX_INLINED_BLOCKS} blocks after expanding branches")
    if len(vals) != len(block.args):
        t.unsupported(op, f"{len(vals)} values passed to {label}, which takes {len(block.args)}")
    t.emit("{")
    t.depth += 1
    saved = dict(t.env)
    for (name, ty), v in zip(block.args, vals):
        t.env[name] = _local_copy(t, name, ty, v)
    t.branch_path.append(label)
    t.block(block.ops)
    t.branch_path.pop()
    t.env = saved
    t.depth -= 1
    t.emit("}")


@handles("cf.br")
def _br(t: Translator, op: Op):
    label, vals = _branch_target(t, op, op.body)
    _jump(t, op, label, vals)


@handles("cf.cond_br")
def _cond_br(t: Translator, op: Op):
    parts = split_top(op.body)
    if len(parts) != 3:
        t.unsupported(op, f"cannot read branch {op.body!r}")
    cond = t.get(parts[0].strip(), op)
    if cond.ty.is_tensor:
        t.unsupported(op, "a branch on a block value")
    targets = [_branch_target(t, op, p) for p in parts[1:]]
    t.emit(f"if ({cond.name})")
    _jump(t, op, *targets[0])
    t.emit("else")
    _jump(t, op, *targets[1])


@handles("ttg.barrier", "gpu.barrier")
def _barrier(t: Translator, op: Op):
    pass  # tl.debug_barrier: a program is one host thread, so there is nothing to wait for


@handles("tt.assert")
def _assert(t: Translator, op: Op):
    t.unsupported(op, "device-side assert (tl.device_assert)")


@handles("tt.print")
def _print(t: Translator, op: Op):
    t.unsupported(op, "device-side print (tl.device_print)")
