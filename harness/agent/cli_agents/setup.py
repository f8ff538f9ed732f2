"""What a CLI agent's session decides before any container: the CLI and its pinned version,
the model it is told, and where the gateway forwards (the real provider with the host's key,
or the scripted provider for a ``scripted:`` model). Every problem is one line here, before a
folder or a container exists."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from harness.agent.gateway.scripted import ScriptedUpstream
from harness.agent.gateway.upstream import Upstream, upstream_from_environment
from harness.agent.providers.scripted import Script, load_script
from harness.errors import HarnessError
from harness.infra.images.cli_binaries import MANIFEST, CliKind, pinned
from harness.records.study import CLI_PROVIDERS, AgentSettings, _resolve

# The model name a CLI is told when the study's model is scripted (the scripted provider
# answers whatever the name; the CLI wants one it knows).
SCRIPTED_MODEL_NAMES: dict[CliKind, str] = {"claude-code": "claude-sonnet-4-5",
                                            "codex": "gpt-5-codex"}


@dataclass(frozen=True)
class CliSetup:
    cli: CliKind
    version: str
    model_name: str  # what the CLI is told (--model, config.toml)
    provider_label: str  # PROVIDER:NAME as recorded
    script: Script | None = None  # a scripted model's steps
    upstream: Upstream | None = None  # a real provider


def prepare_cli(settings: AgentSettings) -> CliSetup:
    kind = settings.kind
    if kind == "loop":
        raise ValueError("prepare_cli is for a CLI agent")
    cli: CliKind = kind
    version = pinned(cli).version
    if settings.cli_version is not None and settings.cli_version != version:
        raise HarnessError(f"the study pins {cli} {settings.cli_version}, the images carry "
                           f"{version} ({MANIFEST})",
                           f"set agent.cli_version: {version}, or pin another version in "
                           f"{MANIFEST} and rebuild the images")
    provider, _, name = settings.model.partition(":")
    if provider == "scripted":
        return CliSetup(cli=cli, version=version, model_name=SCRIPTED_MODEL_NAMES[cli],
                        provider_label=settings.model, script=load_script(_resolve(Path(name))))
    upstream = upstream_from_environment(CLI_PROVIDERS[cli], name)
    return CliSetup(cli=cli, version=version, model_name=name, provider_label=settings.model,
                    upstream=upstream)


@contextlib.contextmanager
def provider_for(setup: CliSetup) -> Iterator[Upstream]:
    """Where the gateway forwards: the real provider, or a scripted one started here (on the
    host's loopback, for the session's length)."""
    if setup.upstream is not None:
        yield setup.upstream
        return
    assert setup.script is not None
    server = ScriptedUpstream(setup.script, setup.cli).start()
    try:
        provider = CLI_PROVIDERS[setup.cli]
        base = server.url if provider == "anthropic" else f"{server.url}/v1"
        yield Upstream(provider=provider, base_url=base,
                       key=SecretStr("scripted-provider-needs-no-key"))
    finally:
        server.close()
