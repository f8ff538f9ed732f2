"""What every provider returns, whatever API it speaks."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, Field


class ToolCall(BaseModel):
    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class TokenUsage(BaseModel):
    """As the provider reported it; the ledger sums exactly these numbers."""

    input_tokens: int = 0
    output_tokens: int = 0


class ModelTurn(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    stop_reason: str = ""
    model: str = ""


class Provider(ABC):
    name: str

    @abstractmethod
    def next_turn(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], max_output_tokens: int
    ) -> ModelTurn:
        """One model call: the conversation so far in, the next assistant turn out."""
