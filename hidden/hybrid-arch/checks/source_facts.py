# HARNESS-CANARY-28102c7e-5a7f-45be-8e9f-78b56e313061
"""What the graded tree's source says, read as text by the judge: a module's docstring and the
modules a tree imports.

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
