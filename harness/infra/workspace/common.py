"""Shared by the workspace modules: the baseline's fixed identity, size errors, reports."""

from __future__ import annotations

from pathlib import Path

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

REPO_CONFIG = """\
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

COPY_CHUNK = 1 << 20


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
