"""Diff and apply, on the host, in fresh repositories."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from harness.errors import HarnessError
from harness.infra.workspace.common import DiffResult, DiffTooLarge
from harness.infra.workspace.copies import copy_tree
from harness.infra.workspace.hostgit import commit_baseline, init_repo, reset_index, run_git


def compute_diff(baseline: Path, final: Path, *, max_diff_bytes: int) -> tuple[bytes, DiffResult]:
    """Binary patch from ``baseline`` to ``final``, computed in a fresh host-side repository.

    Both trees are copied (links as links; ``.git``, ``__pycache__`` and special files left
    out), the baseline committed, then ``final`` staged with ``add -A --force`` and diffed
    against HEAD. No change gives ``b""``. A patch over ``max_diff_bytes`` raises DiffTooLarge.
    """
    with DiffsFromBaseline(baseline) as diffs:
        return diffs.diff(final, max_diff_bytes=max_diff_bytes)


class DiffsFromBaseline:
    """``compute_diff`` for many final trees of one baseline, the baseline copied and
    committed once (the mutation analysis diffs hundreds of one-line variants of one tree;
    the commit was most of each diff's git calls)."""

    def __init__(self, baseline: Path) -> None:
        self._baseline = baseline
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> DiffsFromBaseline:
        self._tmp = tempfile.TemporaryDirectory(prefix="harness-diff-")
        root = Path(self._tmp.name)
        base_tree = root / "baseline"
        base_tree.mkdir()
        copy_tree(self._baseline, base_tree)
        init_repo(self._git_dir)
        commit_baseline(self._git_dir, base_tree)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def _root(self) -> Path:
        if self._tmp is None:
            raise RuntimeError("DiffsFromBaseline is used outside its with block")
        return Path(self._tmp.name)

    @property
    def _git_dir(self) -> Path:
        return self._root / "repo.git"

    def diff(self, final: Path, *, max_diff_bytes: int) -> tuple[bytes, DiffResult]:
        """The patch from the baseline to ``final`` (as ``compute_diff``)."""
        final_tree = self._root / "final"
        final_tree.mkdir()
        try:
            return self._diff(final, final_tree, max_diff_bytes)
        finally:
            shutil.rmtree(final_tree, ignore_errors=True)

    def _diff(self, final: Path, final_tree: Path,
              max_diff_bytes: int) -> tuple[bytes, DiffResult]:
        git_dir = self._git_dir
        skipped = copy_tree(final, final_tree)
        # An index read afresh from the baseline's commit carries no file status: an earlier
        # tree's entries (its copy gone, an inode reused within the same second) can never
        # make a changed file of this one look unchanged.
        reset_index(git_dir)
        run_git(["add", "-A", "--force"], git_dir, final_tree)

        patch_file = self._root / "change.patch"
        # Written to a file so an oversized patch is measured before it is ever read in.
        run_git(["diff", "--cached", "--binary", "--full-index", "--no-textconv", "--no-ext-diff",
              "--no-renames", "--no-color", f"--output={patch_file}", "HEAD"], git_dir)
        size = patch_file.stat().st_size
        if size > max_diff_bytes:
            raise DiffTooLarge(
                f"the agent's diff is {size} bytes, over the cap of {max_diff_bytes} bytes",
                "raise max_diff_bytes if the change is legitimate; otherwise look for build "
                "artifacts or data files the agent left in /workspace",
            )
        patch = patch_file.read_bytes()
        patch_file.unlink()
        status = run_git(["diff", "--cached", "--name-status", "-z", "--no-renames", "HEAD"],
                         git_dir)

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
    init_repo(git_dir)
    patch_file = scratch / "change.patch"
    patch_file.write_bytes(patch)
    args = ["apply", "--binary", "--whitespace=nowarn"]
    if check:
        args.append("--check")
    try:
        run_git([*args, str(patch_file)], git_dir, tree)
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
        copy_tree(baseline, tree)
        _apply(tree, patch, Path(tmp), check=True)


def apply_patch(baseline: Path, patch: bytes, dest: Path) -> None:
    """Copy ``baseline`` to ``dest`` (which must not exist) and apply ``patch`` there."""
    if os.path.lexists(dest):
        raise HarnessError(f"patch destination {dest} already exists", "use a fresh directory")
    dest.mkdir(parents=True)
    copy_tree(baseline, dest)
    if not patch:
        return
    with tempfile.TemporaryDirectory(prefix="harness-apply-") as tmp:
        _apply(dest, patch, Path(tmp), check=False)
