"""A reader for the textual TTIR that Triton's frontend prints (`str(module)`).

Triton's Python MLIR bindings are made for building IR, not for inspecting it (no attribute or
type accessors on arbitrary ops), so the Ember translator reads the printed module instead. The
printer emits one op per line, regions open with `{` at the end of a line and close with a line
starting with `}`; this module turns that into a small tree of `Op`s (results, op name, the text
between, types, source location, regions of blocks) and resolves `#loc` aliases to the kernel's
file and line, so that errors can point at the Python source.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional


class TTIRParseError(RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# Types


@dataclass(frozen=True)
class Ty:
    """A TTIR type: a scalar (shape ()) or a tensor of scalars. `elem` is the MLIR scalar name
    (i1, i32, f16, bf16, f32, ...) or "ptr" with `pointee` set to the pointed-to scalar type."""
    elem: str
    shape: tuple = ()
    pointee: Optional["Ty"] = None

    @property
    def is_tensor(self) -> bool:
        return bool(self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def scalar(self) -> "Ty":
        return Ty(self.elem, (), self.pointee)

    def with_shape(self, shape) -> "Ty":
        return Ty(self.elem, tuple(shape), self.pointee)

    def with_elem(self, elem: str) -> "Ty":
        return Ty(elem, self.shape, None)

    def __str__(self):
        s = f"!tt.ptr<{self.pointee}>" if self.elem == "ptr" else self.elem
        if self.shape:
            return "tensor<" + "x".join(map(str, self.shape)) + "x" + s + ">"
        return s


def parse_type(s: str) -> Ty:
    s = s.strip()
    if s.startswith("tensor<") and s.endswith(">"):
        inner = s[len("tensor<"):-1]
        m = re.match(r"^((?:\d+x)*)(.*)$", inner)
        dims = tuple(int(d) for d in m.group(1).split("x") if d)
        el = parse_type(m.group(2))
        if el.is_tensor:
            raise TTIRParseError(f"nested tensor type {s}")
        return Ty(el.elem, dims, el.pointee)
    if s.startswith("!tt.ptr<") and s.endswith(">"):
        inner = s[len("!tt.ptr<"):-1]
        parts = split_top(inner, ",")
        return Ty("ptr", (), parse_type(parts[0]))
    if re.fullmatch(r"i\d+|f16|bf16|f32|f64|index", s) or s.startswith("f8"):
        return Ty(s)
    raise TTIRParseError(f"unsupported type {s!r}")


# ---------------------------------------------------------------------------------------------
# Text helpers

_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def split_top(s: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside brackets and quotes (`->` is not a closing angle bracket)."""
    out, depth, cur, i, q = [], 0, [], 0, False
    while i < len(s):
        c = s[i]
        if q:
            cur.append(c)
            if c == "\\":
                cur.append(s[i + 1])
                i += 1
            elif c == '"':
                q = False
        elif c == '"':
            q = True
            cur.append(c)
        elif c == "-" and s.startswith("->", i):
            cur.append("->")
            i += 1
        elif c in _OPEN:
            depth += 1
            cur.append(c)
        elif c in _CLOSE:
            depth -= 1
            cur.append(c)
        elif depth == 0 and s.startswith(sep, i):
            out.append("".join(cur).strip())
            cur = []
            i += len(sep) - 1
        else:
            cur.append(c)
        i += 1
    tail = "".join(cur).strip()
    if tail or out:
        out.append(tail)
    return out


def find_top(s: str, needle: str) -> int:
    """Index of the first `needle` outside brackets and quotes, or -1."""
    depth, i, q = 0, 0, False
    while i < len(s):
        c = s[i]
        if q:
            if c == "\\":
                i += 1
            elif c == '"':
                q = False
        elif c == '"':
            q = True
        elif c == "-" and s.startswith("->", i):
            if depth == 0 and s.startswith(needle, i):
                return i
            i += 2
            continue
        elif depth == 0 and s.startswith(needle, i):
            return i
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        i += 1
    return -1


def _match_paren(s: str, start: int) -> int:
    """Index just past the parenthesis group opening at s[start] == '('."""
    depth, i, q = 0, start, False
    while i < len(s):
        c = s[i]
        if q:
            if c == "\\":
                i += 1
            elif c == '"':
                q = False
        elif c == '"':
            q = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise TTIRParseError(f"unbalanced parentheses in {s!r}")


def strip_locs(line: str) -> tuple[str, Optional[str]]:
    """Remove every `loc(...)`; return the text and the last top-level location's body."""
    out, last, i = [], None, 0
    while True:
        j = line.find("loc(", i)
        if j < 0:
            out.append(line[i:])
            break
        if j > 0 and (line[j - 1].isalnum() or line[j - 1] in "_#%"):
            out.append(line[i:j + 4])
            i = j + 4
            continue
        end = _match_paren(line, j + 3)
        out.append(line[i:j])
        last = line[j + 4:end - 1]
        i = end
    return re.sub(r"\s+", " ", "".join(out)).strip(), last


# ---------------------------------------------------------------------------------------------
# Ops


@dataclass
class Block:
    args: list  # [(name, Ty)]
    ops: list = field(default_factory=list)
    label: str = ""  # "^bb1" for a labelled block (the first block of a region has none)


@dataclass
class Op:
    results: list  # SSA names, e.g. ["%0"] or ["%32#0", "%32#1"]
    name: str  # "arith.addf", "tt.reduce", ...
    body: str  # the text after the op name (generic ops: after the quoted name), no locations
    loc: Optional[str]  # location body, resolve with Locations
    regions: list = field(default_factory=list)  # [[Block, ...], ...]
    trailer: str = ""  # for region ops: the text after the closing brace

    def operands(self, text: Optional[str] = None) -> list[str]:
        """SSA operand names in `text` (default: the op text before its top-level ` : `)."""
        if text is None:
            text = self.body
            k = find_top(text, " : ")
            if k >= 0:
                text = text[:k]
        return re.findall(r"%[\w$.\-]+(?:#\d+)?", text)

    def types_text(self) -> str:
        text = self.body if not self.regions else self.trailer
        k = find_top(text, " : ")
        return text[k + 3:].strip() if k >= 0 else ""

    def attr(self, key: str) -> Optional[str]:
        m = re.search(r"\b" + re.escape(key) + r"\s*=\s*([^,}>]+)", self.body)
        return m.group(1).strip() if m else None


_RESULT_RE = re.compile(r"^(%[\w$.\-]+)(?::(\d+))?\s*=\s*")
_FUNC_RE = re.compile(r"^tt\.func\s+(?:public\s+|private\s+)?@([\w$.]+)\(")


@dataclass
class Func:
    name: str
    args: list  # [(name, Ty)]
    body: Block  # the entry block
    loc: Optional[str]
    blocks: list = field(default_factory=list)  # every block of the body, the entry block first


class Locations:
    """`#locN` aliases of a printed module, resolved to (file, line)."""

    def __init__(self, text: str):
        self.alias = {}
        for m in re.finditer(r"^(#loc\d*) = loc\((.*)\)\s*$", text, re.M):
            self.alias[m.group(1)] = m.group(2)

    def resolve(self, body: Optional[str], depth: int = 0):
        if body is None or depth > 50:
            return None
        body = body.strip()
        if body.startswith("#loc"):
            return self.resolve(self.alias.get(body), depth + 1)
        m = re.match(r'^"((?:[^"\\]|\\.)*)":(\d+):(\d+)', body)
        if m:
            return m.group(1), int(m.group(2))
        m = re.match(r"^callsite\((.*) at (.*)\)$", body)
        if m:
            # The callee's location is inside triton's standard library; the caller's is the
            # line of the kernel that used it.
            return self.resolve(m.group(2), depth + 1) or self.resolve(m.group(1), depth + 1)
        m = re.match(r'^"(?:[^"\\]|\\.)*"\((.*)\)$', body)
        if m:
            return self.resolve(m.group(1), depth + 1)
        if body.startswith("fused["):
            for part in split_top(body[6:-1]):
                r = self.resolve(part, depth + 1)
                if r:
                    return r
        return None


def parse_module(text: str) -> tuple[list[Func], Locations]:
    locs = Locations(text)
    lines = [ln for ln in text.splitlines()]
    funcs = []
    i = 0
    n = len(lines)

    def parse_block_ops(i, block, terminators):
        """Parse ops into block until a line starting with '}' (returned, not consumed)."""
        while i < n:
            raw = lines[i].strip()
            if not raw or raw.startswith("#loc") or raw.startswith("//"):
                i += 1
                continue
            if raw.startswith("}"):
                return i
            if raw.startswith("^"):
                # A new block inside the same region: the caller handles it.
                return i
            op, i = parse_op(i)
            block.ops.append(op)
        raise TTIRParseError("unexpected end of module")

    def parse_region(i):
        """Parse blocks after an opening '{' until the matching '}' line; returns (blocks, i of
        the closing line)."""
        blocks = []
        cur = Block([])
        while True:
            i = parse_block_ops(i, cur, None)
            raw = lines[i].strip()
            if raw.startswith("^"):
                if cur.ops or cur.args:
                    blocks.append(cur)
                text, _ = strip_locs(raw)
                text = re.sub(r"\s*//.*$", "", text)  # "^bb1:  // pred: ^bb0"
                m = re.match(r"^(\^[\w]+)(?:\((.*)\))?:$", text)
                if not m:
                    raise TTIRParseError(f"cannot read block header {raw!r}")
                args = []
                if m.group(2):
                    for a in split_top(m.group(2)):
                        nm, ty = a.split(":", 1)
                        args.append((nm.strip(), parse_type(ty)))
                cur = Block(args, label=m.group(1))
                i += 1
                continue
            blocks.append(cur)
            return blocks, i

    def parse_op(i):
        raw = lines[i]
        text, loc = strip_locs(raw)
        results = []
        m = _RESULT_RE.match(text)
        if m:
            base, count = m.group(1), m.group(2)
            results = [f"{base}#{k}" for k in range(int(count))] if count else [base]
            text = text[m.end():]
        # Multiple named results are printed as "%a:2"; several comma-separated names can occur
        # too ("%a, %b = ...").
        elif re.match(r"^%[\w$.\-]+\s*,", text):
            k = text.index("=")
            results = [r.strip() for r in text[:k].split(",")]
            text = text[k + 1:].strip()
        if text.startswith('"'):
            k = text.index('"', 1)
            name = text[1:k]
            body = text[k + 1:]
        else:
            parts = text.split(" ", 1)
            name = parts[0]
            body = parts[1] if len(parts) > 1 else ""
        op = Op(results, name, body.strip(), loc)
        i += 1
        if text.endswith("{"):
            # Region op: the text up to the brace is the header; regions follow.
            op.body = op.body[:-1].strip()
            if op.body.endswith("("):
                op.body = op.body[:-1].strip()
            while True:
                blocks, i = parse_region(i)
                op.regions.append(blocks)
                close_text, close_loc = strip_locs(lines[i])
                i += 1
                rest = close_text[1:].strip()
                if rest.startswith("else {") or rest.startswith("do {"):
                    continue
                if rest.startswith("), ({") or rest.startswith(", {"):
                    continue
                if rest.startswith(")"):
                    rest = rest[1:].strip()
                op.trailer = " " + rest
                if close_loc is not None:
                    op.loc = close_loc
                break
        return op, i

    while i < n:
        raw = lines[i].strip()
        fm = _FUNC_RE.match(raw)
        if fm:
            text, loc = strip_locs(raw)
            start = text.index("(")
            end = _match_paren(text, start)
            args = []
            for a in split_top(text[start + 1:end - 1]):
                if not a:
                    continue
                nm, rest = a.split(":", 1)
                rest = re.sub(r"\{.*\}", "", rest).strip()
                args.append((nm.strip(), parse_type(rest)))
            # The body is a region: an entry block (whose arguments are the function's) and,
            # after an early `return` inside an `if`, labelled blocks that branches (`cf.br`,
            # `cf.cond_br`) jump to.
            blocks, i = parse_region(i + 1)
            blocks[0].args = args
            funcs.append(Func(fm.group(1), args, blocks[0], loc, blocks))
        i += 1
    return funcs, locs
