"""TTIR op handlers for control flow: scf.for and scf.if with their yields, the function's
return, and the unstructured branches (cf.br, cf.cond_br) that an early return inside an `if`
becomes; also the barrier and the device-side print and assert Ember refuses."""
from __future__ import annotations

import re

from .codegen import Op, Translator, Ty, V, _SIZE, ctype, find_top, handles, parse_type, split_top


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
    if m.group(5):
        for part, oty in zip(split_top(m.group(5)), split_top(m.group(6))):
            arg, init = (s.strip() for s in part.split("="))
            ty = parse_type(oty)
            bufs.append((arg, _local_copy(t, arg, ty, t.get(init, op))))
    ivn = t.fresh(iv)
    c = ctype(ivty)
    t.emit(f"for ({c} {ivn} = {lbv.name}; {ivn} < ({c}){ubv.name}; {ivn} += ({c}){stv.name}) {{")
    t.depth += 1
    saved = dict(t.env)
    t.env[iv] = V(ivn, ivty)
    for arg, b in bufs:
        t.env[arg] = b
    t.yield_stack.append(("for", [b for _, b in bufs]))
    blocks = op.regions[0]
    t.block(blocks[0].ops)
    t.yield_stack.pop()
    t.env = saved
    t.depth -= 1
    t.emit("}")
    for r, (_, b) in zip(op.results, bufs):
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
    vals = [t.get(x, op) for x in op.operands()]
    kind, targets = t.yield_stack[-1]
    names = {b.name for b in targets}
    # Yielded values can alias other iteration buffers (a loop that swaps two carried blocks):
    # copy those through temporaries first.
    staged = []
    for v, b in zip(vals, targets):
        if v.ty.is_tensor and v.name in names and v.name != b.name:
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
        if b.ty.is_tensor:
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
