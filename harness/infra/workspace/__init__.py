"""Move code in and out of the agent's container, and turn the result into a patch.

The pristine baseline never leaves the host. The container gets a copy of it (plus a one-commit
git repository, for the agent's convenience) and hands back its final tree as a tar stream. The
diff is then computed on the host in a fresh repository, so nothing the agent does to the
container's ``.git`` (rewritten history, hooks, attributes, ignore files) can hide or alter a
change.

The parts: ``hostgit`` (a repository on the host with its own config), ``copies`` (the
baseline snapshot), ``archive_in`` (into the container), ``archive_out`` (out of it, safely),
``diff`` (diff and apply), ``names`` and ``common``.
"""

from __future__ import annotations

from harness.infra.workspace.archive_in import tar_inputs, workspace_archive
from harness.infra.workspace.archive_out import extract_tree
from harness.infra.workspace.common import (
    AGENT_GID,
    AGENT_UID,
    DiffResult,
    DiffTooLarge,
    ExtractReport,
    UnsafeArchive,
)
from harness.infra.workspace.copies import snapshot_baseline
from harness.infra.workspace.diff import (
    DiffsFromBaseline,
    apply_patch,
    check_applies,
    compute_diff,
)

__all__ = [
    "AGENT_GID", "AGENT_UID", "DiffResult", "DiffTooLarge", "DiffsFromBaseline", "ExtractReport",
    "UnsafeArchive", "apply_patch", "check_applies", "compute_diff", "extract_tree",
    "snapshot_baseline", "tar_inputs", "workspace_archive",
]
