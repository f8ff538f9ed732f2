"""Out of the container: a hostile tar stream extracted safely into a host folder."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from harness.errors import HarnessError
from harness.infra.workspace.common import COPY_CHUNK, DiffTooLarge, ExtractReport, UnsafeArchive
from harness.infra.workspace.names import file_mode, is_git_metadata_name, is_refused_symlink

# What a workspace's tar stream may carry beyond the tree cap: the members the extraction skips
# (the container's .git, whose objects are real data) and every member's headers.
STREAM_ALLOWANCE_BYTES = 1024**3
# Entries a workspace copy takes (files, folders, links, .git's included): the cost of a copy
# and its diff grows with the count (about 0.6 ms an entry here), not only with the bytes, so
# 900,000 empty files made one snapshot take 9 minutes. A task's tree holds a few hundred.
MAX_TREE_ENTRIES = 50_000


class _ChunkReader(io.RawIOBase):
    """Read-only file over an iterable of byte chunks, pulling one chunk at a time, and
    refusing to pull more than ``max_bytes`` in all."""

    def __init__(self, chunks: Iterable[bytes], max_bytes: int) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = memoryview(b"")
        self._max_bytes = max_bytes
        self.pulled = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
            self.pulled += len(self._pending)
            if self.pulled > self._max_bytes:
                raise DiffTooLarge(
                    f"the workspace's tar stream passed {self._max_bytes} bytes (the tree cap "
                    f"plus {STREAM_ALLOWANCE_BYTES} for git metadata and headers) and was cut "
                    "off: /workspace holds sparse files (the copy streams their whole apparent "
                    "size) or that much .git data",
                    "remove them from /workspace; a run whose tree cannot be copied has no diff")
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _member_parts(name: str, strip_prefix: str) -> tuple[str, ...]:
    """Split a member name into safe relative components, with the prefix removed.

    Returns ``()`` for the prefix directory itself.
    """
    if name.startswith("/"):
        raise UnsafeArchive(
            f"workspace archive has an absolute member name {name!r}",
            "the container's archive was tampered with; do not trust this run",
        )
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(
            f"workspace archive member {name!r} has a '..' component",
            "the container's archive was tampered with; do not trust this run",
        )
    if strip_prefix:
        if not parts or parts[0] != strip_prefix:
            raise UnsafeArchive(
                f"workspace archive member {name!r} is outside {strip_prefix}/",
                "pass the archive of the workspace directory itself (get_archive('/workspace'))",
            )
        parts = parts[1:]
    return tuple(parts)


def _parent_problem(dest: Path, parents: tuple[str, ...], *, create: bool) -> str | None:
    """Check (and optionally create) each parent directory; say why a member can't go there.

    A symlinked parent is never written through, wherever it points.
    """
    cur = dest
    for i, part in enumerate(parents):
        cur = cur / part
        try:
            mode = os.lstat(cur).st_mode
        except FileNotFoundError:
            if not create:
                return f"parent {'/'.join(parents[: i + 1])} does not exist"
            os.mkdir(cur, 0o755)
            continue
        if stat.S_ISLNK(mode):
            return f"parent {'/'.join(parents[: i + 1])} is a symlink; not written through it"
        if not stat.S_ISDIR(mode):
            return f"parent {'/'.join(parents[: i + 1])} is not a directory"
    return None


def _clear(path: Path, *, keep_dir: bool) -> None:
    # A later tar member replaces an earlier one; remove it first so that opening the new one
    # can never follow a symlink left at this name.
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        if not keep_dir:
            shutil.rmtree(path)
    else:
        os.unlink(path)


def _write_file(path: Path, src: IO[bytes], mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as out:
        shutil.copyfileobj(src, out, COPY_CHUNK)
        os.fchmod(out.fileno(), mode)


def _too_large(total: int, cap: int) -> DiffTooLarge:
    return DiffTooLarge(
        f"the final workspace holds at least {total} bytes of regular files, "
        f"over the cap of {cap} bytes",
        "raise the extract cap if the change is legitimate; otherwise the agent left large "
        "artifacts in /workspace",
    )


def extract_tree(
    chunks: Iterable[bytes], dest: Path, *, strip_prefix: str = "workspace", max_bytes: int,
    max_stream_bytes: int | None = None, max_entries: int = MAX_TREE_ENTRIES,
) -> ExtractReport:
    """Stream the container's tar of its workspace into ``dest`` (empty or missing).

    Strips ``strip_prefix/``; rejects absolute and ``..`` names (UnsafeArchive); ignores any
    ``.git``; recreates symlinks verbatim and never writes through one; turns hard links into
    copies; skips devices and fifos; raises DiffTooLarge past ``max_bytes`` of file data, or
    past ``max_stream_bytes`` read from the stream (default: ``max_bytes`` plus
    :data:`STREAM_ALLOWANCE_BYTES`), skipped members included, or past ``max_entries`` members,
    so a copy ends in bounded time whatever the container holds (a sparse file of terabytes
    streams as terabytes; a million empty files cost nothing in bytes). On an error ``dest`` is
    left partly filled; the caller owns it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise HarnessError(f"extract destination {dest} is not empty", "use a fresh directory")
    report = ExtractReport()
    regular: set[tuple[str, ...]] = set()
    git_dirs: set[tuple[str, ...]] = set()
    total = 0
    if max_stream_bytes is None:
        max_stream_bytes = max_bytes + STREAM_ALLOWANCE_BYTES
    source = iter(chunks)
    stream = io.BufferedReader(_ChunkReader(source, max_stream_bytes), buffer_size=COPY_CHUNK)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for entries, member in enumerate(tar, start=1):
                if entries > max_entries:
                    raise DiffTooLarge(
                        f"the workspace holds more than {max_entries} entries (files, folders "
                        "and links, .git's included); the copy stopped there",
                        "remove generated files from /workspace; a run whose tree cannot be "
                        "copied has no diff")
                parts = _member_parts(member.name, strip_prefix)
                if not parts:
                    if not member.isdir():
                        report.skipped.append(f"{member.name} (workspace root is not a directory)")
                    continue
                rel = "/".join(parts)
                git_at = next((i for i, p in enumerate(parts) if is_git_metadata_name(p)), None)
                if git_at is not None:
                    key = parts[: git_at + 1]
                    if key not in git_dirs:
                        git_dirs.add(key)
                        report.skipped.append(
                            f"{'/'.join(key)}/... (container git metadata ignored)"
                        )
                    continue
                if member.isfifo():
                    report.skipped.append(f"{rel} (fifo)")
                    continue
                if member.ischr() or member.isblk():
                    report.skipped.append(f"{rel} (device)")
                    continue
                if not (member.isdir() or member.isreg() or member.issym() or member.islnk()):
                    report.skipped.append(f"{rel} (unsupported tar member type {member.type!r})")
                    continue
                problem = _parent_problem(dest, parts[:-1], create=True)
                if problem:
                    report.skipped.append(f"{rel} ({problem})")
                    continue
                target = dest.joinpath(*parts)
                if member.isdir():
                    _clear(target, keep_dir=True)
                    if not target.exists():
                        # Fixed mode: git ignores directory modes, and a 0o000 dir would block us.
                        os.mkdir(target, 0o755)
                    report.dirs += 1
                elif member.issym():
                    if not member.linkname:
                        report.skipped.append(f"{rel} (symlink with an empty target)")
                        continue
                    if is_refused_symlink(parts[-1]):
                        report.skipped.append(f"{rel} (symlinked .gitmodules; git refuses it)")
                        continue
                    _clear(target, keep_dir=False)
                    os.symlink(member.linkname, target)
                    report.symlinks += 1
                elif member.isreg():
                    total += member.size
                    if total > max_bytes:
                        raise _too_large(total, max_bytes)
                    _clear(target, keep_dir=False)
                    src = tar.extractfile(member)
                    assert src is not None
                    _write_file(target, src, file_mode(member.mode))
                    regular.add(parts)
                    report.files += 1
                    report.bytes += member.size
                else:
                    total += _copy_hard_link(
                        member, parts, dest, regular, strip_prefix, report, total, max_bytes
                    )
    except tarfile.TarError as exc:
        raise HarnessError(
            f"could not read the workspace archive: {exc}",
            "the container may have been killed mid-copy; rerun the task",
        ) from exc
    finally:
        # Let go of the rest of the stream now, however this ends (a cap, an interrupt): a
        # generator kept alive by a traceback would hold the daemon's stream, and with it the
        # container's lock (Sandbox.get_archive closes its response when closed).
        close = getattr(source, "close", None)
        if callable(close):
            close()
    return report


def _copy_hard_link(
    member: tarfile.TarInfo,
    parts: tuple[str, ...],
    dest: Path,
    regular: set[tuple[str, ...]],
    strip_prefix: str,
    report: ExtractReport,
    total: int,
    max_bytes: int,
) -> int:
    """Materialise a hard link as a copy of a file extracted earlier; return bytes copied."""
    rel = "/".join(parts)
    source = _member_parts(member.linkname, strip_prefix)
    # Only a regular file this extraction wrote, still reachable without any symlink.
    if source not in regular or _parent_problem(dest, source[:-1], create=False):
        report.skipped.append(f"{rel} (hard link to {member.linkname}, not an extracted file)")
        return 0
    src_path = dest.joinpath(*source)
    try:
        fd = os.open(src_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        report.skipped.append(f"{rel} (hard link to {member.linkname}, not an extracted file)")
        return 0
    with os.fdopen(fd, "rb") as src:
        st = os.fstat(src.fileno())
        if not stat.S_ISREG(st.st_mode):
            report.skipped.append(f"{rel} (hard link to {member.linkname}, not a regular file)")
            return 0
        target = dest.joinpath(*parts)
        if target == src_path:
            return 0
        if total + st.st_size > max_bytes:
            raise _too_large(total + st.st_size, max_bytes)
        _clear(target, keep_dir=False)
        _write_file(target, src, file_mode(st.st_mode))
    regular.add(parts)
    report.files += 1
    report.bytes += st.st_size
    return st.st_size
