"""The diff: applied to the baseline copy as the candidate uid, copies and renames refused."""

from __future__ import annotations

import os
import re
from pathlib import Path

from grading import sealed
from grading.layout import DEFAULT_PATH, EXCERPT_CHARS, NEUTRAL_ATTRIBUTES


def _git_env(work: Path, git_dir: Path, tree: Path) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", DEFAULT_PATH),
        "HOME": str(work / "home"),
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(tree),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }


# Headers that make git read a file other than the one it patches: git checks every path it
# writes, but not the source of a copy or rename, which may lie outside the tree.
_FOREIGN_SOURCE = re.compile(rb"^(copy|rename) from ", re.MULTILINE)


def apply_diff(tree: Path, patch: bytes) -> str | None:
    """Apply ``patch`` to ``tree``; None on success, else why it was refused.

    git runs as the candidate uid, on a tree the candidate owns for the while, with its git
    directory in a job folder: whatever the diff names, git can read nothing the candidate
    could not (the inputs are closed to it). Copy and rename headers are refused outright
    (the harness never writes them: it diffs with ``--no-renames``). The tree is the judge's
    again afterwards.
    """
    if _FOREIGN_SOURCE.search(patch):
        return "the diff copies or renames a file; only plain changes are graded"
    git_dir = sealed.job_dir("git-apply") / "apply.git"
    sealed.hand_over(tree)
    env = _git_env(git_dir.parent, git_dir, tree)
    try:
        sealed.candidate_run(["git", "init", "--quiet"], env=env, cwd=tree, check=True,
                             capture_output=True, timeout=60)
        (git_dir / "info").mkdir(exist_ok=True)
        (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)
        proc = sealed.candidate_run(["git", "apply", "--binary", "--whitespace=nowarn", "-"],
                                    input=patch, env=env, cwd=tree, capture_output=True,
                                    timeout=120)
    finally:
        sealed.end_job()
        sealed.make_readable_tree(tree)
    if proc.returncode == 0:
        return None
    message = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip()
    return message[:EXCERPT_CHARS] or f"git apply exited with code {proc.returncode}"
