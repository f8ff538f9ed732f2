"""Move code in and out of the agent's container, and turn the result into a patch.

The pristine baseline never leaves the host. The container gets a copy of it (plus a one-commit
git repository, for the agent's convenience) and hands back its final tree as a tar stream. The
diff is then computed on the host in a fresh repository, so nothing the agent does to the
container's ``.git`` (rewritten history, hooks, attributes, ignore files) can hide or alter a
change.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

import git
from pydantic import BaseModel, Field

from harness.errors import HarnessError

AGENT_UID = 1000
AGENT_GID = 1000
AGENT_NAME = "agent"
BASELINE_AUTHOR = "harness <harness@localhost>"
BASELINE_DATE = "2000-01-01T00:00:00+00:00"
# The same instant as BASELINE_DATE; every archive member gets it so the tar is reproducible.
BASELINE_EPOCH = 946684800
BASELINE_MESSAGE = "baseline"
BASELINE_BRANCH = "main"

# Directories that are build output, not source: the snapshot never contains them, so leaving them
# out of the diff too keeps bytecode the agent's test runs produced from drowning the patch.
CACHE_DIR_NAMES = frozenset({"__pycache__"})

# Highest-precedence attributes: an agent's in-tree .gitattributes cannot convert line endings,
# run filters, expand idents, re-encode, or flip files to binary in the host-side repositories.
NEUTRAL_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding !diff\n"

_REPO_CONFIG = """\
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
\tsymlinks = true
\tautocrlf = false
\tsafecrlf = false
\tignorecase = false
[user]
\tname = agent
\temail = agent@localhost
"""

_COPY_CHUNK = 1 << 20


class DiffTooLarge(HarnessError):
    """The final tree or its patch is over the configured cap."""


class UnsafeArchive(HarnessError):
    """The container's tar stream names a path outside the workspace."""


class ExtractReport(BaseModel):
    """What :func:`extract_tree` wrote, and what it refused to write and why."""

    files: int = 0
    symlinks: int = 0
    dirs: int = 0
    bytes: int = 0
    skipped: list[str] = Field(default_factory=list)


class DiffResult(BaseModel):
    """Summary of a patch. The patch bytes are returned next to this record, not inside it.

    ``patch_path`` is left ``None`` by :func:`compute_diff` (its temp dir is gone by then); a
    caller that saves the patch into a run directory may record the location here.
    ``skipped`` lists entries of the final tree that cannot be part of a patch (git metadata,
    bytecode caches, special files), each with the reason.
    """

    patch_path: Path | None = None
    bytes: int = 0
    files_changed: list[str] = Field(default_factory=list)
    added: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    modified: list[str] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Names git will not track


def is_git_metadata_name(name: str) -> bool:
    """True for ``.git`` and every spelling git refuses as one (``.GIT``, ``.git.``, ``git~1``).

    Git rejects these names in any path (core.protectNTFS is on by default), so they could never
    reach a patch; treating them all as metadata keeps extraction and diffing in agreement.
    """
    base = name.lower().split(":", 1)[0]
    return base.rstrip(" .") == ".git" or base == "git~1"


def _is_refused_symlink(name: str) -> bool:
    # Git refuses a symlinked .gitmodules (and its NTFS short names) as an invalid path.
    base = name.lower().split(":", 1)[0].rstrip(" .")
    return base == ".gitmodules" or base.startswith("gitmod~")


def _file_mode(mode: int) -> int:
    # Git records only "executable or not", judged by the owner bit; normalise to match.
    return 0o755 if mode & stat.S_IXUSR else 0o644


# ---------------------------------------------------------------------------------------------
# Host-side copies


def _copy_tree(src: Path, dst: Path) -> list[str]:
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
                if _is_refused_symlink(entry.name):
                    skipped.append(f"{path} (symlinked .gitmodules; git refuses it)")
                else:
                    os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(target, 0o755)
                walk(Path(entry.path), target, f"{path}/")
            elif entry.is_file(follow_symlinks=False):
                shutil.copyfile(entry.path, target, follow_symlinks=False)
                os.chmod(target, _file_mode(entry.stat(follow_symlinks=False).st_mode))
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
    _copy_tree(repo_dir, dest)


# ---------------------------------------------------------------------------------------------
# Host-side git


def _git_env(git_dir: Path, work_tree: Path | None) -> dict[str, str]:
    # Hermetic: no user/system config or attributes, and explicit locations so GIT_* variables
    # inherited from the caller's environment cannot point git at some other repository.
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "HOME": os.devnull,
        "XDG_CONFIG_HOME": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_DIR": str(git_dir),
        "GIT_INDEX_FILE": str(git_dir / "index"),
        "GIT_OBJECT_DIRECTORY": str(git_dir / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
        "GIT_AUTHOR_NAME": "harness",
        "GIT_AUTHOR_EMAIL": "harness@localhost",
        "GIT_AUTHOR_DATE": BASELINE_DATE,
        "GIT_COMMITTER_NAME": "harness",
        "GIT_COMMITTER_EMAIL": "harness@localhost",
        "GIT_COMMITTER_DATE": BASELINE_DATE,
    }
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    return env


def _git(args: list[str], git_dir: Path, work_tree: Path | None = None) -> bytes:
    """Run git against ``git_dir`` and return raw stdout; failures become HarnessError."""
    cwd = work_tree if work_tree is not None else git_dir.parent
    status, out, err = git.Git(str(cwd)).execute(
        ["git", *args],
        env=_git_env(git_dir, work_tree),
        with_extended_output=True,
        with_exceptions=False,
        stdout_as_string=False,
        strip_newline_in_stdout=False,
    )
    if status != 0:
        message = err.decode(errors="replace") if isinstance(err, bytes) else str(err)
        raise HarnessError(
            f"git {args[0]} failed: {message.strip() or f'exit status {status}'}",
            "check the paths named above; the harness needs git >= 2.28 on the host",
        )
    return out if isinstance(out, bytes) else str(out).encode()


def _init_repo(git_dir: Path) -> None:
    """Create a repository at ``git_dir`` with fixed config and neutralising attributes."""
    git_dir.parent.mkdir(parents=True, exist_ok=True)
    _git(["init", "-q", "--bare", f"--initial-branch={BASELINE_BRANCH}", "--template=",
          str(git_dir)], git_dir)
    # Written by hand rather than by `git config` so the file is identical on every run and no
    # core.worktree leaks in from the environment.
    (git_dir / "config").write_text(_REPO_CONFIG)
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)


def _commit_baseline(git_dir: Path, work_tree: Path) -> None:
    """Commit ``work_tree`` as the single deterministic "baseline" commit on main."""
    _git(["add", "-A", "--force"], git_dir, work_tree)
    tree = _git(["write-tree"], git_dir).decode().strip()
    commit = _git(["commit-tree", tree, "-m", BASELINE_MESSAGE], git_dir).decode().strip()
    # Plumbing and no reflog: nothing but the commit itself (no COMMIT_EDITMSG, no dated log).
    _git(["-c", "core.logAllRefUpdates=false", "update-ref", f"refs/heads/{BASELINE_BRANCH}",
          commit], git_dir)
    _reset_index(git_dir)


def _reset_index(git_dir: Path) -> None:
    # An index from read-tree carries no stat data (inode, ctime, ...): it is byte-identical on
    # every run, and git must compare content rather than trust stat info on the next `add`.
    (git_dir / "index").unlink(missing_ok=True)
    _git(["read-tree", "HEAD"], git_dir)


# ---------------------------------------------------------------------------------------------
# Into the container


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
        info.mode = _file_mode(st.st_mode)
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
        _copy_tree(baseline, work)
        git_dir = work / ".git"
        _init_repo(git_dir)
        _commit_baseline(git_dir, work)
        return _tar_dir(work)


# ---------------------------------------------------------------------------------------------
# Out of the container


class _ChunkReader(io.RawIOBase):
    """Read-only file over an iterable of byte chunks, pulling one chunk at a time."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
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
        shutil.copyfileobj(src, out, _COPY_CHUNK)
        os.fchmod(out.fileno(), mode)


def _too_large(total: int, cap: int) -> DiffTooLarge:
    return DiffTooLarge(
        f"the final workspace holds at least {total} bytes of regular files, "
        f"over the cap of {cap} bytes",
        "raise the extract cap if the change is legitimate; otherwise the agent left large "
        "artifacts in /workspace",
    )


def extract_tree(
    chunks: Iterable[bytes], dest: Path, *, strip_prefix: str = "workspace", max_bytes: int
) -> ExtractReport:
    """Stream the container's tar of its workspace into ``dest`` (empty or missing).

    Strips ``strip_prefix/``; rejects absolute and ``..`` names (UnsafeArchive); ignores any
    ``.git``; recreates symlinks verbatim and never writes through one; turns hard links into
    copies; skips devices and fifos; raises DiffTooLarge past ``max_bytes`` of file data. On an
    error ``dest`` is left partly filled; the caller owns it.
    """
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise HarnessError(f"extract destination {dest} is not empty", "use a fresh directory")
    report = ExtractReport()
    regular: set[tuple[str, ...]] = set()
    git_dirs: set[tuple[str, ...]] = set()
    total = 0
    stream = io.BufferedReader(_ChunkReader(chunks), buffer_size=_COPY_CHUNK)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
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
                    if _is_refused_symlink(parts[-1]):
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
                    _write_file(target, src, _file_mode(member.mode))
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
        _write_file(target, src, _file_mode(st.st_mode))
    regular.add(parts)
    report.files += 1
    report.bytes += st.st_size
    return st.st_size


# ---------------------------------------------------------------------------------------------
# Diff and apply


def compute_diff(baseline: Path, final: Path, *, max_diff_bytes: int) -> tuple[bytes, DiffResult]:
    """Binary patch from ``baseline`` to ``final``, computed in a fresh host-side repository.

    Both trees are copied (links as links; ``.git``, ``__pycache__`` and special files left
    out), the baseline committed, then ``final`` staged with ``add -A --force`` and diffed
    against HEAD. No change gives ``b""``. A patch over ``max_diff_bytes`` raises DiffTooLarge.
    """
    with tempfile.TemporaryDirectory(prefix="harness-diff-") as tmp:
        root = Path(tmp)
        base_tree, final_tree, git_dir = root / "baseline", root / "final", root / "repo.git"
        base_tree.mkdir()
        final_tree.mkdir()
        _copy_tree(baseline, base_tree)
        skipped = _copy_tree(final, final_tree)
        _init_repo(git_dir)
        _commit_baseline(git_dir, base_tree)
        _git(["add", "-A", "--force"], git_dir, final_tree)

        patch_file = root / "change.patch"
        # Written to a file so an oversized patch is measured before it is ever read in.
        _git(["diff", "--cached", "--binary", "--full-index", "--no-textconv", "--no-ext-diff",
              "--no-renames", "--no-color", f"--output={patch_file}", "HEAD"], git_dir)
        size = patch_file.stat().st_size
        if size > max_diff_bytes:
            raise DiffTooLarge(
                f"the agent's diff is {size} bytes, over the cap of {max_diff_bytes} bytes",
                "raise max_diff_bytes if the change is legitimate; otherwise look for build "
                "artifacts or data files the agent left in /workspace",
            )
        patch = patch_file.read_bytes()
        status = _git(["diff", "--cached", "--name-status", "-z", "--no-renames", "HEAD"], git_dir)

    result = DiffResult(bytes=size, skipped=skipped)
    fields = status.split(b"\0")
    for letter, raw in zip(fields[0::2], fields[1::2], strict=False):
        path = os.fsdecode(raw)
        result.files_changed.append(path)
        if letter == b"A":
            result.added.append(path)
        elif letter == b"D":
            result.deleted.append(path)
        else:  # M (content or mode) or T (type change, e.g. file -> symlink)
            result.modified.append(path)
    return patch, result


def _apply(tree: Path, patch: bytes, scratch: Path, *, check: bool) -> None:
    """Run ``git apply --binary`` on ``tree`` using a throwaway git dir under ``scratch``."""
    git_dir = scratch / "apply.git"
    _init_repo(git_dir)
    patch_file = scratch / "change.patch"
    patch_file.write_bytes(patch)
    args = ["apply", "--binary", "--whitespace=nowarn"]
    if check:
        args.append("--check")
    try:
        _git([*args, str(patch_file)], git_dir, tree)
    except HarnessError as exc:
        raise HarnessError(
            f"the patch does not apply to the baseline: {exc.problem}",
            "the patch is corrupt or was made against a different baseline; recompute it",
        ) from exc


def check_applies(baseline: Path, patch: bytes) -> None:
    """Raise HarnessError (with git's message) unless ``patch`` applies cleanly to ``baseline``."""
    if not patch:
        return
    with tempfile.TemporaryDirectory(prefix="harness-check-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        _copy_tree(baseline, tree)
        _apply(tree, patch, Path(tmp), check=True)


def apply_patch(baseline: Path, patch: bytes, dest: Path) -> None:
    """Copy ``baseline`` to ``dest`` (which must not exist) and apply ``patch`` there."""
    if os.path.lexists(dest):
        raise HarnessError(f"patch destination {dest} already exists", "use a fresh directory")
    dest.mkdir(parents=True)
    _copy_tree(baseline, dest)
    if not patch:
        return
    with tempfile.TemporaryDirectory(prefix="harness-apply-") as tmp:
        _apply(dest, patch, Path(tmp), check=False)
