"""The package's version and the checkout it runs from, for ``harness --version``."""

from __future__ import annotations

from importlib import metadata

from harness.paths import REPO_ROOT


def checkout_commit() -> str:
    """The checkout's commit (``+dirty`` when it has uncommitted changes), or ``unknown``."""
    try:
        import git

        repo = git.Repo(REPO_ROOT)
        dirty = "+dirty" if repo.is_dirty(untracked_files=False) else ""
        return repo.head.commit.hexsha + dirty
    except Exception:  # not a git checkout (an installed copy): say so, never fail
        return "unknown"


def describe() -> str:
    try:
        version = metadata.version("harness")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return f"harness {version} (checkout {checkout_commit()})"
