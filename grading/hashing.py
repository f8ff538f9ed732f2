"""Every digest the project takes, one rule per purpose.

- ``file_sha256``: the bytes of one file (records, manifests, diffs, locks).
- ``tree_sha256``: what grading and the study lock trust a tree by (hidden checks, baselines,
  packets): each path with its kind, exec bit and content or link target; caches
  (``__pycache__``, ``.pytest_cache``) and ``.git`` left out, so running checks by hand does
  not change a digest.
- ``reference_tree_sha256``: the TrainCheck reference's record of the packet it was learned
  on: regular files' paths and contents only (the rule its committed manifests were written
  with; changing it would call every frozen reference stale).
- ``add_image_context``: an image's build inputs (a Dockerfile folder or a copied package):
  paths, permission bits and contents, folded into the image's inputs digest.
- ``grader_source_sha256``: the grading package's own source, which binds a grade to the
  grader that wrote it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from grading.trees import tree_entries

SKIP_HASH_DIRS = frozenset({"__pycache__", ".pytest_cache", ".git"})
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_sha256(root: Path) -> str:
    h = hashlib.sha256()
    for rel, entry in tree_entries(root).items():
        if set(rel.split("/")[:-1]) & SKIP_HASH_DIRS:
            continue
        if entry.kind == "link":
            line = f"link {rel} {os.readlink(entry.path)}"
        elif entry.kind == "file":
            mode = "x" if os.stat(entry.path).st_mode & stat.S_IXUSR else "f"
            line = f"{mode} {rel} {file_sha256(entry.path)}"
        else:
            line = f"other {rel}"
        h.update(line.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()


def reference_tree_sha256(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def add_image_context(digest: hashlib._Hash, root: Path, prefix: str) -> None:
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or not path.is_file():
            continue
        rel = f"{prefix}/{path.relative_to(root).as_posix()}"
        digest.update(f"{rel}\0{path.stat().st_mode & 0o777}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())


def grader_source_sha256() -> str:
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        h.update(path.name.encode() + b"\n" + path.read_bytes() + b"\n")
    return h.hexdigest()
