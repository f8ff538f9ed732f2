"""The coding-agent CLIs' native binaries: pinned in ``images/cli/binaries.yaml``, fetched on
the host with ``npm pack`` into ``.cache/cli-agents/`` and checked byte for byte.

Each CLI's npm package is a JavaScript wrapper around one native executable published in a
platform package (Claude Code: a single self-contained binary; Codex: a static musl binary and
its helpers). The image needs only those files, so no Node runs in the sandbox and nothing is
installed from the network at build time: the build copies the checked files into the image,
as the wheelhouse does for Python.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, RootModel

from grading.yamlfile import YamlFileError, load_model
from harness.errors import HarnessError
from harness.infra.images.specs import CLI_KINDS, CliKind, Log
from harness.paths import CACHE_DIR, IMAGES_DIR

__all__ = ["CLI_KINDS", "CliKind", "PinnedCli", "ensure_cli_tree", "pinned", "read_manifest"]
MANIFEST = IMAGES_DIR / "cli" / "binaries.yaml"
CLI_CACHE = CACHE_DIR / "cli-agents"
# Where a CLI's files go in the image (the Dockerfile copies the checked tree there).
AGENT_ROOT = "/opt/harness-agent"
# No platform package of either CLI is near this; a larger tarball is not the one pinned.
MAX_TARBALL_BYTES = 1024**3


class PinnedFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: str = Field(pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class PinnedCli(BaseModel):
    """One CLI as the images carry it."""

    model_config = ConfigDict(extra="forbid")

    npm_package: str
    version: str
    platform_package: str  # the npm spec `npm pack` fetches
    tarball_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    entrypoint: str  # under AGENT_ROOT
    files: dict[str, PinnedFile]  # path in the package -> where it goes

    @property
    def executable(self) -> str:
        return f"{AGENT_ROOT}/{self.entrypoint}"


class CliManifest(RootModel[dict[CliKind, PinnedCli]]):
    pass


def read_manifest(path: Path = MANIFEST) -> dict[CliKind, PinnedCli]:
    try:
        return load_model(path, CliManifest, what="CLI binaries manifest").root
    except YamlFileError as exc:
        raise HarnessError(str(exc), f"restore {path} from git") from None


def pinned(kind: CliKind) -> PinnedCli:
    manifest = read_manifest()
    if kind not in manifest:
        raise HarnessError(f"{MANIFEST} pins no {kind} CLI", f"restore {MANIFEST} from git")
    return manifest[kind]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def cli_tree(kind: CliKind, cache: Path = CLI_CACHE) -> Path:
    """The checked folder of ``kind``'s files (what goes to AGENT_ROOT), fetched if missing."""
    return cache / f"{kind}-{pinned(kind).version}"


def verify_tree(kind: CliKind, tree: Path) -> str | None:
    """Why ``tree`` is not exactly the pinned files of ``kind``; None when it is."""
    spec = pinned(kind)
    for source, target in spec.files.items():
        path = tree / target.to
        if not path.is_file():
            return f"{path} is missing (from {source})"
        if _sha256(path) != target.sha256:
            return f"{path} does not match its pinned sha256"
    return None


def ensure_cli_tree(kind: CliKind, log: Log, cache: Path = CLI_CACHE) -> Path:
    """The pinned files of one CLI in the host cache, downloaded with ``npm pack`` when absent;
    every file is checked against the manifest each time (a cache is not trusted)."""
    spec = pinned(kind)
    tree = cli_tree(kind, cache)
    if tree.is_dir() and verify_tree(kind, tree) is None:
        return tree
    cache.mkdir(parents=True, exist_ok=True)
    tarball = _fetch(spec, cache, log)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        staged = Path(tmp) / "tree"
        _extract(spec, tarball, staged)
        shutil.rmtree(tree, ignore_errors=True)
        staged.rename(tree)
    problem = verify_tree(kind, tree)
    if problem:
        raise HarnessError(f"the {kind} files fetched do not match {MANIFEST}: {problem}",
                           f"delete {cache} and run `harness images build` again")
    return tree


def _fetch(spec: PinnedCli, cache: Path, log: Log) -> Path:
    packs = cache / "npm"
    packs.mkdir(exist_ok=True)
    expected = [p for p in packs.glob("*.tgz") if p.stat().st_size <= MAX_TARBALL_BYTES
                and _sha256(p) == spec.tarball_sha256]
    if expected:
        return expected[0]
    if shutil.which("npm") is None:
        raise HarnessError(f"the {spec.npm_package} {spec.version} binary is not in the cache "
                           f"({cache}) and npm is not installed to fetch it",
                           "install npm (apt-get install npm) and run `harness images build` "
                           "with the npm registry reachable")
    log(f"fetching {spec.platform_package} with npm pack into {packs}")
    result = subprocess.run(["npm", "pack", spec.platform_package, "--silent",
                             "--pack-destination", str(packs)],
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        tail = " | ".join(result.stderr.strip().splitlines()[-2:])
        raise HarnessError(f"npm pack {spec.platform_package} failed: {tail[:300]}",
                           "check that the npm registry is reachable from this host")
    name = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    tarball = packs / name
    if not name or not tarball.is_file():
        raise HarnessError(f"npm pack {spec.platform_package} wrote no tarball",
                           "run it by hand to see why")
    if _sha256(tarball) != spec.tarball_sha256:
        tarball.unlink()
        raise HarnessError(f"{spec.platform_package} from the registry does not match its "
                           f"pinned sha256 in {MANIFEST}",
                           "the registry served other bytes: check the pin before trusting it")
    return tarball


def _extract(spec: PinnedCli, tarball: Path, into: Path) -> None:
    """Copy the pinned files out of the npm tarball (members under ``package/``); nothing
    else is extracted, so no member can land outside ``into``."""
    wanted = {f"package/{source}": target for source, target in spec.files.items()}
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar:
            target = wanted.pop(member.name, None)
            if target is None:
                continue
            if not member.isfile():
                raise HarnessError(f"{tarball.name}: {member.name} is not a regular file",
                                   "the package is not the one pinned")
            out = into / target.to
            out.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            with out.open("wb") as fh:
                shutil.copyfileobj(source, fh, 1 << 20)
            out.chmod(0o755)
    if wanted:
        raise HarnessError(f"{tarball.name} lacks {sorted(wanted)}", "the pin names files the "
                           "package does not hold: fix images/cli/binaries.yaml")
