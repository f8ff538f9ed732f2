"""Names git will not track, and the file modes a tree keeps."""

from __future__ import annotations

import stat


def is_git_metadata_name(name: str) -> bool:
    """True for ``.git`` and every spelling git refuses as one (``.GIT``, ``.git.``, ``git~1``).

    Git rejects these names in any path (core.protectNTFS is on by default), so they could never
    reach a patch; treating them all as metadata keeps extraction and diffing in agreement.
    """
    base = name.lower().split(":", 1)[0]
    return base.rstrip(" .") == ".git" or base == "git~1"


def is_refused_symlink(name: str) -> bool:
    # Git refuses a symlinked .gitmodules (and its NTFS short names) as an invalid path.
    base = name.lower().split(":", 1)[0].rstrip(" .")
    return base == ".gitmodules" or base.startswith("gitmod~")


def file_mode(mode: int) -> int:
    # Git records only "executable or not", judged by the owner bit; normalise to match.
    return 0o755 if mode & stat.S_IXUSR else 0o644
