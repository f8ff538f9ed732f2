"""Host-side git: a repository with its own config, never the user's or the agent's."""

from __future__ import annotations

import os
from pathlib import Path

import git

from harness.errors import HarnessError
from harness.infra.workspace.common import (
    BASELINE_BRANCH,
    BASELINE_DATE,
    BASELINE_MESSAGE,
    NEUTRAL_ATTRIBUTES,
    REPO_CONFIG,
)


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


def run_git(args: list[str], git_dir: Path, work_tree: Path | None = None) -> bytes:
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


def init_repo(git_dir: Path) -> None:
    """Create a repository at ``git_dir`` with fixed config and neutralising attributes."""
    git_dir.parent.mkdir(parents=True, exist_ok=True)
    run_git(["init", "-q", "--bare", f"--initial-branch={BASELINE_BRANCH}", "--template=",
          str(git_dir)], git_dir)
    # Written by hand rather than by `git config` so the file is identical on every run and no
    # core.worktree leaks in from the environment.
    (git_dir / "config").write_text(REPO_CONFIG)
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text(NEUTRAL_ATTRIBUTES)


def commit_baseline(git_dir: Path, work_tree: Path) -> None:
    """Commit ``work_tree`` as the single deterministic "baseline" commit on main."""
    run_git(["add", "-A", "--force"], git_dir, work_tree)
    tree = run_git(["write-tree"], git_dir).decode().strip()
    commit = run_git(["commit-tree", tree, "-m", BASELINE_MESSAGE], git_dir).decode().strip()
    # Plumbing and no reflog: nothing but the commit itself (no COMMIT_EDITMSG, no dated log).
    run_git(["-c", "core.logAllRefUpdates=false", "update-ref", f"refs/heads/{BASELINE_BRANCH}",
          commit], git_dir)
    reset_index(git_dir)


def reset_index(git_dir: Path) -> None:
    """The index read afresh from HEAD: entries with no file status, so the next ``add``
    hashes every file it stages."""
    # An index from read-tree carries no stat data (inode, ctime, ...): it is byte-identical on
    # every run, and git must compare content rather than trust stat info on the next `add`.
    (git_dir / "index").unlink(missing_ok=True)
    run_git(["read-tree", "HEAD"], git_dir)
