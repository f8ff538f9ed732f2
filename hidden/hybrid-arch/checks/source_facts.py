# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""What the graded tree's source says, read as text by the judge: a module's docstring, the
modules a tree imports, and a module's public definitions (signatures and defaults).

HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
Never copy this file (or anything under hidden/) into an agent's image, workspace or prompt.

Nothing here imports or runs candidate code. Files are read bounded and never through a link;
the docstring comes from the tokenizer (no recursion on hostile nesting) and imports from the
parser, whose failure on a file is reported as that file's problem, not raised.
"""

from __future__ import annotations

import ast
import io
import os
import stat
import sys
import tokenize
from pathlib import Path

MAX_SOURCE_BYTES = 2 * 1024 * 1024
MAX_SOURCE_FILES = 500
# Folders of the tree that are not the candidate's code: the grader discards tests/, and
# caches or environments are not imported by train.py.
SKIPPED_DIRS = {"tests", "__pycache__", ".git", ".venv", "venv"}


def read_source(path: Path) -> str:
    """A regular file's text (at most MAX_SOURCE_BYTES), never through a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_SOURCE_BYTES} bytes")
    return data.decode("utf-8")


def module_docstring(path: Path) -> str:
    """The docstring of a module (its first statement when that is a plain string literal),
    '' when it has none."""
    tokens = tokenize.generate_tokens(io.StringIO(read_source(path)).readline)
    skipped = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.ENCODING}
    for tok in tokens:
        if tok.type in skipped:
            continue
        if tok.type != tokenize.STRING:
            return ""
        value = ast.literal_eval(tok.string)  # one string literal: bytes and f-strings are not docs
        return value if isinstance(value, str) else ""
    return ""


def python_files(root: Path) -> list[Path]:
    """The tree's .py files outside SKIPPED_DIRS, links not followed, at most MAX_SOURCE_FILES."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        found += [Path(folder) / f for f in sorted(files) if f.endswith(".py")]
        if len(found) > MAX_SOURCE_FILES:
            raise ValueError(f"more than {MAX_SOURCE_FILES} Python files under {root.name}")
    return found


def _imported_in(tree: ast.AST) -> set[str]:
    """Top-level names of absolute imports, and of import_module/__import__ calls with a
    literal name."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if called in ("import_module", "__import__") and isinstance(first, ast.Constant) \
                    and isinstance(first.value, str):
                names.add(first.value.split(".")[0])
    return names


def tree_imports(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """{top-level module: the tree's files that import it} and the files that could not be
    read or parsed (with why)."""
    imports: dict[str, set[str]] = {}
    problems: list[str] = []
    for path in python_files(root):
        rel = path.relative_to(root).as_posix()
        try:
            parsed = ast.parse(read_source(path), filename=rel)
        except (OSError, ValueError, SyntaxError, RecursionError, MemoryError) as exc:
            problems.append(f"{rel}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        for name in _imported_in(parsed):
            imports.setdefault(name, set()).add(rel)
    return imports, problems


def local_modules(root: Path) -> set[str]:
    """Names a tree's own top-level modules and packages import as."""
    return {p.stem if p.is_file() else p.name for p in root.iterdir()
            if not p.is_symlink() and ((p.is_file() and p.suffix == ".py")
                                       or (p.is_dir() and (p / "__init__.py").is_file()))}


def new_dependencies(root: Path, baseline: Path) -> tuple[dict[str, set[str]], list[str]]:
    """Modules the tree imports that are neither the standard library, the tree's own modules,
    nor imported by the pristine baseline: {module: files}, and the files not judged."""
    imports, problems = tree_imports(root)
    allowed = set(sys.stdlib_module_names) | {"__future__"} | local_modules(root)
    baseline_imports, _ = tree_imports(baseline)
    allowed |= set(baseline_imports)
    return {m: f for m, f in imports.items() if m not in allowed}, problems


# Methods whose names start with an underscore but are part of how a class is called.
CALLED_DUNDERS = {"__init__", "__post_init__", "__call__"}


def _public(name: str) -> bool:
    return not name.startswith("_") or name in CALLED_DUNDERS


def _parameters(args: ast.arguments) -> str:
    """A parameter list as text: names, kinds and default expressions (annotations left out)."""
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    parts = [a.arg if d is None else f"{a.arg}={ast.unparse(d)}"
             for a, d in zip(positional, defaults, strict=True)]
    if args.posonlyargs:
        parts.insert(len(args.posonlyargs), "/")
    if args.vararg is not None:
        parts.append(f"*{args.vararg.arg}")
    elif args.kwonlyargs:
        parts.append("*")
    parts += [a.arg if d is None else f"{a.arg}={ast.unparse(d)}"
              for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    if args.kwarg is not None:
        parts.append(f"**{args.kwarg.arg}")
    return f"({', '.join(parts)})"


def _assigned(node: ast.stmt) -> list[tuple[str, str]]:
    """(name, value as text) of a plain or annotated assignment to names (no value: '')."""
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [(node.target.id, "" if node.value is None else ast.unparse(node.value))]
    if isinstance(node, ast.Assign):
        return [(t.id, ast.unparse(node.value)) for t in node.targets if isinstance(t, ast.Name)]
    return []


def public_signatures(path: Path) -> dict[str, str]:
    """A module's public definitions as text, read by the parser (nothing runs): {name:
    definition} for each top-level function and each method of a top-level class (parameters
    and default expressions), each class's fields (its annotated class attributes with their
    defaults, as a dataclass declares them) and each module-level assignment to a public name.
    Raises ValueError when the file cannot be read or parsed."""
    try:
        tree = ast.parse(read_source(path), filename=path.name)
        out: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
                out[node.name] = _parameters(node.args)
            elif isinstance(node, ast.ClassDef) and _public(node.name):
                fields = []
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                            and _public(item.name):
                        out[f"{node.name}.{item.name}"] = _parameters(item.args)
                    elif isinstance(item, ast.AnnAssign):
                        fields += [f"{name}={value}" if value else name
                                   for name, value in _assigned(item)]
                out[f"{node.name} fields"] = ", ".join(fields)
            else:
                out |= {name: value for name, value in _assigned(node) if _public(name)}
        return out
    except (OSError, SyntaxError, RecursionError, MemoryError) as exc:
        raise ValueError(f"{path.name} could not be parsed: {type(exc).__name__}: "
                         f"{str(exc)[:200]}") from exc
