"""Where the repository's folders are, for every module that needs one."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = REPO_ROOT / "images"  # the Dockerfile folders and pinned requirements
CACHE_DIR = REPO_ROOT / ".cache"  # wheelhouse, build logs, rootfs scratch (not in git)
