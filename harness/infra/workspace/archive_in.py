"""Into the container: the baseline (plus a one-commit repository) as a tar stream."""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
from pathlib import Path

from harness.infra.workspace.common import AGENT_GID, AGENT_NAME, AGENT_UID, BASELINE_EPOCH
from harness.infra.workspace.copies import copy_tree
from harness.infra.workspace.hostgit import commit_baseline, init_repo
from harness.infra.workspace.names import file_mode


def _tar_info(name: str, st: os.stat_result | None, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mtime = BASELINE_EPOCH
    info.uid, info.gid = AGENT_UID, AGENT_GID
    info.uname = info.gname = AGENT_NAME
    if kind == tarfile.DIRTYPE:
        info.mode = 0o755
    elif kind == tarfile.SYMTYPE:
        info.mode = 0o777
    else:
        assert st is not None
        info.mode = file_mode(st.st_mode)
        info.size = st.st_size
    return info


def _tar_dir(root: Path) -> bytes:
    """Tar ``root``'s contents under ``.`` in sorted order with fixed metadata."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_tar_info(".", None, tarfile.DIRTYPE))

        def walk(d: Path, rel: str) -> None:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                name = f"{rel}{entry.name}"
                if entry.is_symlink():
                    info = _tar_info(name, None, tarfile.SYMTYPE)
                    info.linkname = os.readlink(entry.path)
                    tar.addfile(info)
                elif entry.is_dir(follow_symlinks=False):
                    tar.addfile(_tar_info(name, None, tarfile.DIRTYPE))
                    walk(Path(entry.path), f"{name}/")
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    with open(entry.path, "rb") as fh:
                        tar.addfile(_tar_info(name, st, tarfile.REGTYPE), fh)

        walk(root, "")
    return buf.getvalue()


def workspace_archive(baseline: Path) -> bytes:
    """Tar for ``put_archive("/workspace", ...)``: the baseline plus a one-commit ``.git``.

    Every member is owned by uid/gid 1000 ("agent"), stamped with the fixed baseline date, and
    listed in sorted order, so the same baseline always yields the same bytes.
    """
    with tempfile.TemporaryDirectory(prefix="harness-ws-") as tmp:
        work = Path(tmp) / "workspace"
        work.mkdir()
        copy_tree(baseline, work)
        git_dir = work / ".git"
        init_repo(git_dir)
        commit_baseline(git_dir, work)
        return _tar_dir(work)


def tar_inputs(entries: dict[str, Path], *, uid: int = 0) -> bytes:
    """One tar of the grader's inputs, owned by ``uid`` (symlinks stay links)."""
    buf = io.BytesIO()

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = uid
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in entries.items():
            tar.add(path, arcname=name, filter=owned)
    return buf.getvalue()
