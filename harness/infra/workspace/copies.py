"""Host-side copies: the pristine baseline snapshot of a packet's repository."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.errors import HarnessError
from harness.infra.workspace.common import CACHE_DIR_NAMES
from harness.infra.workspace.names import file_mode, is_git_metadata_name, is_refused_symlink


def copy_tree(src: Path, dst: Path) -> list[str]:
    """Copy ``src`` into the existing directory ``dst`` without following any symlink.

    Symlinks are recreated with the same target text; files get 0o644/0o755; git metadata,
    bytecode caches and special files are left out and returned as ``"path (reason)"``.
    """
    skipped: list[str] = []

    def walk(s: Path, d: Path, rel: str) -> None:
        with os.scandir(s) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            path = f"{rel}{entry.name}"
            target = d / entry.name
            if is_git_metadata_name(entry.name):
                skipped.append(f"{path} (git metadata ignored)")
            elif entry.name in CACHE_DIR_NAMES:
                skipped.append(f"{path} (python bytecode cache ignored)")
            elif entry.is_symlink():
                if is_refused_symlink(entry.name):
                    skipped.append(f"{path} (symlinked .gitmodules; git refuses it)")
                else:
                    os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(target, 0o755)
                walk(Path(entry.path), target, f"{path}/")
            elif entry.is_file(follow_symlinks=False):
                shutil.copyfile(entry.path, target, follow_symlinks=False)
                os.chmod(target, file_mode(entry.stat(follow_symlinks=False).st_mode))
            else:
                skipped.append(f"{path} (special file)")

    walk(src, dst, "")
    return skipped


def snapshot_baseline(repo_dir: Path, dest: Path) -> None:
    """Copy a task packet's ``repo/`` to ``dest``, the pristine host-side baseline.

    Regular files, directories and symlinks (as links) are copied; any ``.git`` and
    ``__pycache__`` are skipped. ``dest`` must not exist yet.
    """
    if not repo_dir.is_dir():
        raise HarnessError(
            f"task repository {repo_dir} is not a directory",
            "check the task packet: it needs a repo/ directory",
        )
    if os.path.lexists(dest):
        raise HarnessError(
            f"baseline destination {dest} already exists",
            "use a fresh run directory, or remove the old baseline first",
        )
    dest.mkdir(parents=True)
    copy_tree(repo_dir, dest)
