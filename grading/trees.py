"""Trees: copy, compare and restore the paths the agent may not change."""

from __future__ import annotations

import filecmp
import os
import shutil
import stat
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from grading.models import (
    RestoreInfo,
)
from grading.packet import PacketSpec


@dataclass(frozen=True)
class TreeEntry:
    kind: str  # "file", "link" or "other" (fifo, socket, device: never copied)
    path: Path


def tree_entries(root: Path) -> dict[str, TreeEntry]:
    """Every non-directory under ``root`` by repo-relative posix path; links are not followed."""
    found: dict[str, TreeEntry] = {}

    def walk(d: Path, rel: str) -> None:
        with os.scandir(d) as it:
            for e in sorted(it, key=lambda e: e.name):
                r = f"{rel}{e.name}"
                p = Path(e.path)
                if e.is_symlink():
                    found[r] = TreeEntry("link", p)
                elif e.is_dir(follow_symlinks=False):
                    walk(p, r + "/")
                elif e.is_file(follow_symlinks=False):
                    found[r] = TreeEntry("file", p)
                else:
                    found[r] = TreeEntry("other", p)

    walk(root, "")
    return found


def copy_tree(src: Path, dst: Path, *, skip_top: frozenset[str] = frozenset()) -> None:
    """Copy files and symlinks (as links); special files are skipped, never opened."""
    dst.mkdir(parents=True, exist_ok=True)
    for rel, entry in tree_entries(src).items():
        if rel.split("/", 1)[0] in skip_top:
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.kind == "link":
            os.symlink(os.readlink(entry.path), target)
        elif entry.kind == "file":
            shutil.copy2(entry.path, target, follow_symlinks=False)


def _same(a: TreeEntry, b: TreeEntry) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind == "link":
        return os.readlink(a.path) == os.readlink(b.path)
    if a.kind != "file":
        return False
    sa, sb = os.stat(a.path), os.stat(b.path)
    if sa.st_size != sb.st_size or (sa.st_mode ^ sb.st_mode) & stat.S_IXUSR:
        return False
    return filecmp.cmp(a.path, b.path, shallow=False)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _real_parents(root: Path, rel: str) -> None:
    """Make every parent of ``root/rel`` a real directory, so a restore never writes through a
    symlink (or into a file) the diff put where the baseline has a directory."""
    current = root
    for part in rel.split("/")[:-1]:
        current = current / part
        if current.is_symlink() or (os.path.lexists(current) and not current.is_dir()):
            current.unlink()
        if not os.path.lexists(current):
            current.mkdir()


def _matches(rel: str, globs: list[str]) -> bool:
    return any(fnmatchcase(rel, g) for g in globs)


def restore_locked_paths(repo: Path, baseline: Path, spec: PacketSpec) -> RestoreInfo:
    """Put back every path the agent may not change; remove files it may not add.

    A path is locked when it matches ``protected_paths`` or matches no ``editable_paths`` glob
    (``packet.py``: the grader ignores changes outside the editable paths).
    """
    info = RestoreInfo()
    base, work = tree_entries(baseline), tree_entries(repo)

    def locked(rel: str) -> bool:
        return _matches(rel, spec.protected_paths) or not _matches(rel, spec.editable_paths)

    for rel in sorted(work.keys() - base.keys()):
        if locked(rel):
            _remove(repo / rel)
            info.removed.append(rel)
    for rel in sorted(base):
        if not locked(rel):
            continue
        current = work.get(rel)
        if current is not None and _same(base[rel], current):
            continue
        if base[rel].kind not in ("file", "link"):
            continue
        _real_parents(repo, rel)
        target = repo / rel
        _remove(target)
        if base[rel].kind == "link":
            os.symlink(os.readlink(base[rel].path), target)
        else:
            shutil.copy2(base[rel].path, target, follow_symlinks=False)
        info.restored.append(rel)
    return info
