"""Model providers behind one interface: ``scripted:``, ``openai:``, ``anthropic:``."""

from __future__ import annotations

from pathlib import Path

from harness.agent.providers.base import Provider
from harness.errors import HarnessError
from harness.records.study import AgentSettings, _resolve


def make_provider(settings: AgentSettings) -> Provider:
    """The provider named by ``settings.model`` (``KIND:NAME``); errors before any container."""
    kind, _, name = settings.model.partition(":")
    if kind == "scripted":
        from harness.agent.providers.scripted import ScriptedProvider

        return ScriptedProvider(_resolve(Path(name)))
    if kind == "openai":
        from harness.agent.providers.openai import OpenAIProvider

        return OpenAIProvider(name, settings)
    if kind == "anthropic":
        from harness.agent.providers.anthropic import AnthropicProvider

        return AnthropicProvider(name, settings)
    raise HarnessError(f"unknown model provider {kind!r}",
                       "use scripted:<file>, openai:<model> or anthropic:<model>")
