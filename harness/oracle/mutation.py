"""Mutants of a task's reference solution, for measuring how strong its hidden checks are.

Two scopes, scored apart. ``diff``: the lines the reference adds or changes, where the feature
an agent writes lives. ``beyond``: the other lines of the editable files that the reference's
grade executed (its line coverage), where realistic mistakes also live: a correct-looking
line in code the reference left alone (the trainer's loss composition, an option's other
path). Each mutation is one small edit of the source text at an AST node's span, so a
mutant's diff is one hunk a reviewer can read, and every mutant compiles (the rest are
dropped).

Three families of operators:

- classic, after the operator families of the kept mutation tools (mutmut, cosmic-ray):
  arithmetic and comparison operator replacement, boolean operators, numeric and boolean
  constants, a function or option's default, negated conditions, deleted statements;
- ML-systems: mean<->sum reductions, dropped or duplicated collectives and ``no_sync``,
  scaling by world size or not, ceil<->floor and off-by-one at boundaries, dropped
  ``device=``/``dtype=`` arguments and placement calls, dropped residuals and ``detach``,
  every rank reading rank 0's shard, a key dropped from a state dict;
- insertion, for mistakes that add rather than change: a statement with an effect run twice,
  an extra random draw (every later random number shifts), an arithmetic value scaled, a
  tensor computed by a call detached from the graph.

Sampling is even across operators: a ``limit`` takes operators round-robin, each operator's
mutants in a seeded random order, so no single operator fills the budget.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import random
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field

from harness.infra.workspace import DiffsFromBaseline, apply_patch

T = TypeVar("T")
Family = Literal["classic", "ml-systems", "insertion"]
Scope = Literal["diff", "beyond"]
SCOPES: tuple[Scope, ...] = ("diff", "beyond")

OPERATORS: dict[str, tuple[Family, str]] = {
    "arith": ("classic", "arithmetic operator replaced (+/-, *//, ///)"),
    "compare": ("classic", "comparison operator replaced (< <=, == !=, in / not in)"),
    "boolean": ("classic", "and<->or, not dropped"),
    "constant": ("classic", "numeric constant +-1, boolean flipped"),
    "default": ("classic", "a parameter's or option's default changed"),
    "negate-condition": ("classic", "an if/while condition negated"),
    "delete-statement": ("classic", "a statement replaced by pass"),
    "reduction": ("ml-systems", "mean<->sum, ReduceOp swapped"),
    "collective-drop": ("ml-systems", "an all-reduce / gather / broadcast / barrier removed"),
    "collective-dup": ("ml-systems", "a collective issued twice"),
    "no-sync": ("ml-systems", "no_sync() / no_grad() replaced by a null context"),
    "world-size": ("ml-systems", "scaling by the world size dropped"),
    "ceil-floor": ("ml-systems", "ceil<->floor, ceil division <-> floor division"),
    "off-by-one": ("ml-systems", "range / slice bound +-1"),
    "device-dtype": ("ml-systems", "device=/dtype= dropped, .to()/.float() placement dropped"),
    "residual": ("ml-systems", "x + f(x) -> f(x)"),
    "detach": ("ml-systems", ".detach() dropped"),
    "rank-offset": ("ml-systems", "the rank in an offset replaced by 0"),
    "state-key": ("ml-systems", "a key dropped from a dict literal (state dicts, records)"),
    "duplicate-statement": ("insertion", "a call, in-place update or calling assignment run "
                                         "twice"),
    "insert-call": ("insertion", "an extra random draw (torch.rand) before a statement"),
    "scale-value": ("insertion", "an assigned or returned arithmetic value scaled by 2"),
    "detach-tensor": ("insertion", "a tensor computed by a call detached from the graph"),
}

COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "barrier", "all_to_all",
    "all_to_all_single", "reduce", "gather", "scatter",
})
_REDUCTIONS = {"mean": "sum", "sum": "mean", "nanmean": "nansum", "nansum": "nanmean"}
_REDUCE_OPS = {"SUM": "AVG", "AVG": "SUM", "MAX": "MIN", "MIN": "MAX"}
_PLACEMENT_CALLS = frozenset({"to", "float", "double", "half", "bfloat16", "cpu", "cuda",
                              "contiguous"})
_BINOP_SWAPS: dict[type[ast.operator], tuple[str, ...]] = {
    ast.Add: ("-",), ast.Sub: ("+",), ast.Mult: ("/",), ast.Div: ("*", "//"),
    ast.FloorDiv: ("/",), ast.Mod: ("//",), ast.Pow: ("*",),
}
_CMP_SWAPS: dict[type[ast.cmpop], str] = {
    ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "==",
    ast.Is: "is not", ast.IsNot: "is", ast.In: "not in", ast.NotIn: "in",
}
# Calls whose result is a tensor in the graph (a ``.detach()`` appended to one compiles and
# runs, and cuts the gradient): torch's, torch.nn.functional's and tensor methods' names.
_TENSOR_CALLS = frozenset({
    "softmax", "log_softmax", "matmul", "mm", "bmm", "einsum", "linear", "gelu", "silu", "relu",
    "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "mean", "sum", "cumsum", "conv1d",
    "layer_norm", "rms_norm", "cross_entropy", "mse_loss", "nll_loss", "dropout", "pad", "cat",
    "stack", "where", "gather", "scatter_add", "masked_fill", "reshape", "view", "transpose",
    "permute", "unsqueeze", "squeeze", "flatten", "expand", "contiguous", "pow", "clamp",
    "abs", "norm", "mul", "add", "div",
})
_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


class Mutant(BaseModel):
    """One mutant: where, what changed, and the diff an agent would have submitted."""

    id: str
    operator: str
    family: Family
    # "diff": a line the reference adds or changes; "beyond": another line of an editable
    # file that the reference's grade executed.
    scope: Scope = "diff"
    path: str
    line: int
    original: str
    mutated: str
    # The innermost statement holding the edit, in the reference's file.
    first_line: int = 0
    last_line: int = 0
    # reference -> mutant: the one edit, as a unified diff a reviewer reads.
    change: str
    # baseline -> reference with this one edit, as ``git diff --binary``: what is graded. Kept
    # out of reports (the run folder's mutants.json has it), so a loaded report has "".
    diff: str = Field(default="", exclude=True, repr=False)


@dataclass(frozen=True)
class _Edit:
    operator: str
    start: int  # byte offsets into the file
    end: int
    replacement: str
    # Lines of the innermost statement holding the edit: if none of them ran while the
    # reference was graded, no check can see the mutant (grading.trace).
    first_line: int
    last_line: int


def changed_lines(patch: bytes) -> dict[str, set[int]]:
    """Per ``.py`` file, the new-side line numbers a unified diff adds or changes."""
    lines: dict[str, set[int]] = {}
    path: str | None = None
    new_line = 0
    for raw in patch.splitlines():
        if raw.startswith(b"+++ "):
            name = raw[4:].decode("utf-8", "replace").strip()
            path = name[2:] if name.startswith("b/") else None
            if path is not None and not path.endswith(".py"):
                path = None
            continue
        if raw.startswith(b"--- ") or raw.startswith(b"diff --git"):
            continue
        hunk = _HUNK.match(raw)
        if hunk:
            new_line = int(hunk.group(1))
            continue
        if path is None or not new_line:
            continue
        if raw.startswith(b"+"):
            lines.setdefault(path, set()).add(new_line)
            new_line += 1
        elif raw.startswith(b" "):
            new_line += 1
    return lines


class _Source:
    """A file's text with (line, column) -> byte offset, as ``ast`` positions count."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.starts = [0]
        for i, byte in enumerate(self.data):
            if byte == 0x0A:
                self.starts.append(i + 1)

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        assert node.end_lineno is not None and node.end_col_offset is not None  # type: ignore[attr-defined]
        return (self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
                self.offset(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.data[start:end].decode("utf-8")

    def line_text(self, line: int) -> str:
        end = self.starts[line] if line < len(self.starts) else len(self.data)
        return self.data[self.starts[line - 1]:end].decode("utf-8").rstrip("\n")


def _name_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _name_of(node.func)
    return ""


def _is_world_size(node: ast.AST) -> bool:
    return "world_size" in _name_of(node) or _name_of(node) == "world"


def _is_rank(node: ast.AST) -> bool:
    return _name_of(node) in ("rank", "get_rank", "local_rank")


class _Mutator(ast.NodeVisitor):
    """Collects edits for nodes that start on a line in scope (``changed``)."""

    def __init__(self, src: _Source, changed: set[int], *, has_torch: bool = False,
                 statements_by_first_line: bool = False) -> None:
        self.src = src
        self.changed = changed
        # Beyond the diff, the lines in scope are those that ran, and a multi-line statement's
        # continuation lines get no line event of their own: its first line decides.
        self.statements_by_first_line = statements_by_first_line
        self.has_torch = has_torch  # the module binds ``torch`` (an inserted draw can use it)
        self.edits: list[_Edit] = []
        self.defaults: set[int] = set()  # ids of constants that are a default
        self.statements: list[ast.stmt] = []

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.stmt):
            self.statements.append(node)
            try:
                super().visit(node)
            finally:
                self.statements.pop()
        else:
            super().visit(node)

    def _lines(self, stmt: ast.AST | None) -> tuple[int, int]:
        node = stmt if stmt is not None else (self.statements[-1] if self.statements else None)
        if node is None:
            return 1, len(self.src.starts)
        return node.lineno, node.end_lineno or node.lineno  # type: ignore[attr-defined]

    def _touched(self, node: ast.AST) -> bool:
        return getattr(node, "lineno", 0) in self.changed

    def _whole(self, node: ast.AST) -> bool:
        """Every line of the node is a changed line (safe to delete it), or, by first line,
        its first line is in scope."""
        if self.statements_by_first_line:
            return node.lineno in self.changed  # type: ignore[attr-defined]
        end = getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
        return all(n in self.changed for n in range(node.lineno, end + 1))  # type: ignore[attr-defined]

    def add(self, operator: str, node: ast.AST, replacement: str,
            stmt: ast.AST | None = None) -> None:
        start, end = self.src.span(node)
        self.edits.append(_Edit(operator, start, end, replacement, *self._lines(stmt)))

    def add_span(self, operator: str, start: int, end: int, replacement: str) -> None:
        self.edits.append(_Edit(operator, start, end, replacement, *self._lines(None)))

    def t(self, node: ast.AST) -> str:
        return self.src.text(node)

    # -- expressions

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if self._touched(node):
            left, right = self.t(node.left), self.t(node.right)
            # A path joined with a string ("out / f'x.pt'") has no arithmetic to get wrong:
            # swapping its operator only makes a TypeError, a mutant that teaches nothing.
            stringy = any(isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant)
                          and isinstance(n.value, str)) for n in (node.left, node.right))
            for op in () if stringy else _BINOP_SWAPS.get(type(node.op), ()):
                self.add("arith", node, f"({left}) {op} ({right})")
            if isinstance(node.op, ast.Mult | ast.Div | ast.FloorDiv):
                if _is_world_size(node.right):
                    self.add("world-size", node, f"({left})")
                elif isinstance(node.op, ast.Mult) and _is_world_size(node.left):
                    self.add("world-size", node, f"({right})")
            if isinstance(node.op, ast.FloorDiv):
                self.add("ceil-floor", node, f"(-(-({left}) // ({right})))")
            if (isinstance(node.op, ast.FloorDiv) and isinstance(node.left, ast.UnaryOp)
                    and isinstance(node.left.op, ast.USub)):
                self.add("ceil-floor", node, f"(({self.t(node.left.operand)}) // ({right}))")
            if isinstance(node.op, ast.Add):
                if isinstance(node.right, ast.Call) and not isinstance(node.left, ast.Constant):
                    self.add("residual", node, f"({right})")
                elif isinstance(node.left, ast.Call) and not isinstance(node.right, ast.Constant):
                    self.add("residual", node, f"({left})")
            if isinstance(node.op, ast.Mult | ast.Add) and (
                    _is_rank(node.left) or _is_rank(node.right)):
                other = node.right if _is_rank(node.left) else node.left
                self.add("rank-offset", node, "0" if isinstance(node.op, ast.Mult)
                         else f"({self.t(other)})")
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if self._touched(node) and len(node.ops) == 1:
            swap = _CMP_SWAPS.get(type(node.ops[0]))
            if swap:
                self.add("compare", node,
                         f"({self.t(node.left)}) {swap} ({self.t(node.comparators[0])})")
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        if self._touched(node):
            word = " or " if isinstance(node.op, ast.And) else " and "
            self.add("boolean", node, word.join(f"({self.t(v)})" for v in node.values))
        self.generic_visit(node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if self._touched(node) and isinstance(node.op, ast.Not):
            self.add("boolean", node, f"({self.t(node.operand)})")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not self._touched(node):
            return
        operator = "default" if id(node) in self.defaults else "constant"
        value = node.value
        if isinstance(value, bool):
            self.add(operator, node, repr(not value))
        elif isinstance(value, int):
            self.add(operator, node, repr(value + 1))
            if value != 0:
                self.add(operator, node, repr(value - 1))
        elif isinstance(value, float):
            self.add(operator, node, repr(value * 2 if value else 1.0))

    def visit_Call(self, node: ast.Call) -> None:
        if self._touched(node):
            self._call(node)
        for kw in node.keywords:
            if kw.arg == "default" and isinstance(kw.value, ast.Constant):
                self.defaults.add(id(kw.value))
        self.generic_visit(node)

    def _call(self, node: ast.Call) -> None:
        func = node.func
        name = _name_of(func)
        if isinstance(func, ast.Attribute):
            receiver = self.t(func.value)
            if name in _REDUCTIONS:
                self.add("reduction", func, f"{receiver}.{_REDUCTIONS[name]}")
            if name in ("ceil", "floor") and receiver in ("math", "torch", "np", "numpy"):
                self.add("ceil-floor", func, f"{receiver}.{'floor' if name == 'ceil' else 'ceil'}")
            if name in _PLACEMENT_CALLS and not node.keywords and len(node.args) <= 2:
                self.add("device-dtype", node, f"({receiver})")
            if name == "detach" and not node.args:
                self.add("detach", node, f"({receiver})")
            if name in ("no_sync", "no_grad", "join"):
                self.add("no-sync", node, "__import__('contextlib').nullcontext()")
        elif isinstance(func, ast.Name):
            if name in ("ceil", "floor"):
                self.add("ceil-floor", func, "floor" if name == "ceil" else "ceil")
            if name in ("int", "round") and len(node.args) == 1 and not node.keywords:
                self.add("ceil-floor", func, "__import__('math').ceil")
            if name == "range" and node.args:
                bound = node.args[-1] if len(node.args) > 1 else node.args[0]
                text = self.t(bound)
                self.add("off-by-one", bound, f"({text}) + 1")
                self.add("off-by-one", bound, f"({text}) - 1")
        for kw in node.keywords:
            if kw.arg in ("device", "dtype"):
                self._drop_keyword(node, kw)

    def _drop_keyword(self, call: ast.Call, kw: ast.keyword) -> None:
        """The call without this keyword argument (text between its neighbours removed)."""
        items: list[ast.AST] = [*call.args, *call.keywords]
        items.sort(key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]
        i = items.index(kw)
        start, end = self.src.span(kw)
        if i > 0:
            start = self.src.span(items[i - 1])[1]
        elif i + 1 < len(items):
            end = self.src.span(items[i + 1])[0]
        self.add_span("device-dtype", start, end, "")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self._touched(node) and isinstance(node.slice, ast.Slice):
            for bound in (node.slice.lower, node.slice.upper):
                if bound is not None:
                    text = self.t(bound)
                    self.add("off-by-one", bound, f"({text}) + 1")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (self._touched(node) and node.attr in _REDUCE_OPS
                and _name_of(node.value) == "ReduceOp"):
            self.add("reduction", node, f"{self.t(node.value)}.{_REDUCE_OPS[node.attr]}")
        self.generic_visit(node)

    def visit_Dict(self, node: ast.Dict) -> None:
        if self._touched(node) and len(node.keys) > 1:
            for i, key in enumerate(node.keys):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    rest = [f"{self.t(k)}: {self.t(v)}" if k is not None else f"**{self.t(v)}"
                            for j, (k, v) in enumerate(zip(node.keys, node.values, strict=True))
                            if j != i]
                    self.add("state-key", node, "{" + ", ".join(rest) + "}")
        self.generic_visit(node)

    # -- definitions and statements

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if isinstance(default, ast.Constant):
                self.defaults.add(id(default))
        self._body(node.body)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        # Dataclass fields: ``name: int = 3`` is a default too.
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.value, ast.Constant):
                self.defaults.add(id(stmt.value))
        self.generic_visit(node)

    def visit_If(self, node: ast.If | ast.While) -> None:
        if self._touched(node.test):
            self.add("negate-condition", node.test, f"not ({self.t(node.test)})")
        self._body(node.body)
        self._body(node.orelse)
        self.generic_visit(node)

    visit_While = visit_If

    def visit_For(self, node: ast.For) -> None:
        self._body(node.body)
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        self._body(node.body)
        self.generic_visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        self._body(node.body)
        self._body(node.finalbody)
        self.generic_visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        self._body(node.body)
        self.generic_visit(node)

    def _body(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if not self._whole(stmt):
                continue
            simple = isinstance(stmt, ast.Expr | ast.Assign | ast.AugAssign | ast.AnnAssign
                                | ast.Return)
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            indent = " " * stmt.col_offset
            twice = f"{self.t(stmt)}\n{indent}{self.t(stmt)}"
            if isinstance(call, ast.Call) and _name_of(call.func) in COLLECTIVES:
                self.add("collective-drop", stmt, "pass", stmt)
                self.add("collective-dup", stmt, twice, stmt)
            elif simple and not (isinstance(stmt, ast.AnnAssign) and stmt.value is None):
                self.add("delete-statement", stmt, "pass", stmt)
                if isinstance(call, ast.Call) or isinstance(stmt, ast.AugAssign) or (
                        isinstance(stmt, ast.Assign | ast.AnnAssign)
                        and any(isinstance(n, ast.Call) for n in ast.walk(stmt))):
                    self.add("duplicate-statement", stmt, twice, stmt)
            self._insertions(stmt, indent)

    def _insertions(self, stmt: ast.stmt, indent: str) -> None:
        """The insertion family's edits of one statement (every line of it in scope)."""
        # A draw where training code runs (inside a function), not at import or class level.
        in_function = any(isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef)
                          for s in self.statements)
        if self.has_torch and in_function and not isinstance(
                stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Import
                | ast.ImportFrom | ast.Global | ast.Nonlocal):
            self.add("insert-call", stmt, f"torch.rand(())\n{indent}{self.t(stmt)}", stmt)
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AugAssign | ast.AnnAssign
                                         | ast.Return) else None
        if value is None:
            return
        if isinstance(value, ast.BinOp) and not any(
                isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant)
                                                 and isinstance(n.value, str))
                for n in ast.walk(value)):
            self.add("scale-value", value, f"({self.t(value)}) * 2", stmt)
        if (isinstance(stmt, ast.Assign | ast.AnnAssign) and isinstance(value, ast.Call)
                and _name_of(value.func) in _TENSOR_CALLS):
            self.add("detach-tensor", value, f"({self.t(value)}).detach()", stmt)


def _binds_torch(tree: ast.Module) -> bool:
    """The module imports ``torch`` under that name at its top level."""
    return any(isinstance(node, ast.Import) and any(a.name == "torch" and a.asname is None
                                                   for a in node.names)
               for node in tree.body)


def _edits(source: str, changed: set[int], scope: Scope) -> list[_Edit]:
    src = _Source(source)
    tree = ast.parse(source)
    mutator = _Mutator(src, changed, has_torch=_binds_torch(tree),
                       statements_by_first_line=scope == "beyond")
    mutator.visit(tree)
    return mutator.edits


def _apply_edit(source: str, edit: _Edit) -> str:
    data = source.encode("utf-8")
    return (data[:edit.start] + edit.replacement.encode("utf-8") + data[edit.end:]).decode()


def _mutant_id(operator: str, path: str, mutated: str) -> str:
    digest = hashlib.sha256(f"{path}\0{mutated}".encode()).hexdigest()[:10]
    return f"{operator}-{digest}"


def _compiles(source: str, path: str) -> bool:
    try:
        compile(source, path, "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def _candidates(reference_tree: Path, changed: dict[str, set[int]], scope: Scope,
                seen: set[str]) -> Iterator[tuple[str, _Edit, str, str]]:
    """(path, edit, original source, mutated source) for every compiling mutant not ``seen``
    (shared by the scopes: a mutant is generated once)."""
    for path in sorted(changed):
        source = (reference_tree / path).read_text(encoding="utf-8")
        for edit in _edits(source, changed[path], scope):
            mutated = _apply_edit(source, edit)
            if mutated == source or not _compiles(mutated, path):
                continue
            key = hashlib.sha256(f"{path}\0{mutated}".encode()).hexdigest()
            if key in seen:
                continue
            seen.add(key)
            yield path, edit, source, mutated


def _change(path: str, source: str, mutated: str) -> str:
    return "".join(difflib.unified_diff(source.splitlines(keepends=True),
                                        mutated.splitlines(keepends=True),
                                        f"reference/{path}", f"mutant/{path}", n=1))


def sample_evenly(by_operator: dict[str, list[T]], limit: int | None, seed: int) -> list[T]:
    """Round-robin over operators, each in a seeded random order, up to ``limit``."""
    rng = random.Random(seed)
    queues = {op: rng.sample(ms, len(ms)) for op, ms in sorted(by_operator.items())}
    chosen: list[T] = []
    while any(queues.values()) and (limit is None or len(chosen) < limit):
        for op in sorted(queues):
            if queues[op] and (limit is None or len(chosen) < limit):
                chosen.append(queues[op].pop())
    return chosen


def generate_mutants(baseline: Path, reference_patch: bytes, *, limit: int | None = None,
                     seed: int = 0, operators: set[str] | None = None,
                     ids: set[str] | None = None,
                     beyond: dict[str, set[int]] | None = None,
                     include_diff: bool = True) -> list[Mutant]:
    """Mutants of the reference's added and changed lines (scope ``diff``, unless not
    ``include_diff``) and, given ``beyond`` (path -> lines: ``beyond_lines``), of those lines
    too (scope ``beyond``), sampled evenly by scope and operator (``ids``: exactly those
    mutants, e.g. to re-check survivors after a new check)."""
    unknown = (operators or set()) - set(OPERATORS)
    if unknown:
        raise ValueError(f"unknown mutation operator(s) {sorted(unknown)}; "
                         f"known: {', '.join(OPERATORS)}")
    scopes: list[tuple[Scope, dict[str, set[int]]]] = (
        [("diff", changed_lines(reference_patch))] if include_diff else [])
    if beyond:
        scopes.append(("beyond", beyond))
    # Sampled before any diff is computed (a git call each): a limit costs what it keeps.
    by_operator: dict[str, list[_Candidate]] = {}
    with tempfile.TemporaryDirectory(prefix="harness-mutants-") as tmp:
        tree = Path(tmp) / "reference"
        apply_patch(baseline, reference_patch, tree)
        seen: set[str] = set()
        for scope, lines in scopes:
            for path, edit, source, mutated in _candidates(tree, lines, scope, seen):
                if operators and edit.operator not in operators:
                    continue
                mid = _mutant_id(edit.operator, path, mutated)
                if ids is not None and mid not in ids:
                    continue
                by_operator.setdefault(f"{scope}:{edit.operator}", []).append(
                    _Candidate(mid, scope, path, edit, source, mutated))
        if ids is not None:
            missing = ids - {c.id for cs in by_operator.values() for c in cs}
            if missing:
                raise ValueError(f"no mutant with id(s) {sorted(missing)} (the reference "
                                 "changed, or the id is mistyped)")
        with DiffsFromBaseline(baseline) as diffs:
            return [_mutant(diffs, tree, c) for c in sample_evenly(by_operator, limit, seed)]


@dataclass(frozen=True)
class _Candidate:
    """A mutant before its graded diff is computed."""

    id: str
    scope: Scope
    path: str
    edit: _Edit
    source: str
    mutated: str


def _mutant(diffs: DiffsFromBaseline, tree: Path, candidate: _Candidate) -> Mutant:
    """One mutant of the reference ``tree``: the edit as a reviewer reads it, and the diff
    from the baseline that is graded."""
    scope, path, edit = candidate.scope, candidate.path, candidate.edit
    source, mutated = candidate.source, candidate.mutated
    line = source.encode("utf-8")[:edit.start].count(b"\n") + 1
    target = tree / path
    target.write_text(mutated, encoding="utf-8")
    try:
        patch, _ = diffs.diff(tree, max_diff_bytes=32 * 1024**2)
    finally:
        target.write_text(source, encoding="utf-8")
    original_src, mutated_src = _Source(source), _Source(mutated)
    span_lines = edit.replacement.count("\n") + 1
    return Mutant(
        id=candidate.id, operator=edit.operator,
        family=OPERATORS[edit.operator][0], scope=scope, path=path, line=line,
        first_line=edit.first_line, last_line=edit.last_line,
        original=original_src.line_text(line).strip(),
        mutated="\n".join(mutated_src.line_text(line + k).strip() for k in range(span_lines)),
        change=_change(path, source, mutated), diff=patch.decode("utf-8", "replace"))


def beyond_lines(coverage: Mapping[str, Mapping[str, Iterable[int]]], reference_patch: bytes,
                 files: Iterable[str]) -> dict[str, set[int]]:
    """The ``beyond`` scope: per file of ``files`` (the reference tree's editable ``.py``
    files, relative), the lines some contract executed while the reference was graded, less
    the lines the reference adds or changes. ``coverage`` (contract -> file -> lines) names
    files by their path in the grader; a repository file is matched by suffix, as the grader
    matches a mutant's lines (``grading.trace.lines_of``)."""
    changed = changed_lines(reference_patch)
    lines: dict[str, set[int]] = {}
    for rel in sorted(files):
        suffix = "/" + rel.lstrip("/")
        ran = {n for by_file in coverage.values() for path, numbers in by_file.items()
               if path.endswith(suffix) for n in numbers}
        ran -= changed.get(rel, set())
        if ran:
            lines[rel] = ran
    return lines
