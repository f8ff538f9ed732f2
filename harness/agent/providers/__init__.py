"""Model providers behind one interface: ``scripted:``, ``openai:``, ``anthropic:``."""

from __future__ import annotations

from pathlib import Path

from harness.agent.providers.base import Provider
from harness.errors import HarnessError
from harness.study import AgentSettings, _resolve


def make_provider(settings: AgentSettings) -> Provider:
    """The provider named by ``settings.model`` (``KIND:NAME``); errors before any container."""
    kind, _, name = settings.model.partition(":")
    if kind == "scripted":
        from harness.agent.providers.scripted import ScriptedProvider

        return ScriptedProvider(_resolve(Path(name)))
    raise HarnessError(
        f"model provider {kind!r} is not available in this version of the harness",
        "use a scripted:<file> model until the OpenAI/Anthropic providers land",
    )
