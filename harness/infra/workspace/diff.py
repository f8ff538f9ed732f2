"""Diff and apply, on the host, in fresh repositories."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.errors import HarnessError
from harness.infra.workspace.common import DiffResult, DiffTooLarge
from harness.infra.workspace.copies import copy_tree
from harness.infra.workspace.hostgit import commit_baseline, init_repo, run_git


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
        copy_tree(baseline, base_tree)
        skipped = copy_tree(final, final_tree)
        init_repo(git_dir)
        commit_baseline(git_dir, base_tree)
        run_git(["add", "-A", "--force"], git_dir, final_tree)

        patch_file = root / "change.patch"
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
