"""What every provider returns, whatever API it speaks, and the retry policy they share.

A provider implements ``_call`` (one HTTP request, bounded by a timeout) and maps its SDK's
errors to ``TransientError`` (worth retrying: 429, 5xx, connection drops, timeouts) or
``ProviderError`` (not fixable by retrying: 400, 401, a malformed response). ``next_turn``
wraps ``_call`` in tenacity: exponential backoff with jitter, ``Retry-After`` honoured, every
attempt reported, waits reported apart from working time, and never past the session's
deadline: each attempt's timeout is the time left.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, Field, field_validator
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt
from tenacity.wait import wait_exponential_jitter

from harness.errors import HarnessError
from harness.records.study import AgentSettings, RetryPolicy
from harness.text import scrub_surrogates

# The one argument a call carries when the model's arguments were not a JSON object of finite
# values: their text, kept so the transcript records what was sent; the tool refuses the call.
UNPARSED_ARGUMENTS = "__unparsed_arguments__"


# No tool takes arguments nested deeper than this; deeper ones are refused, not kept (writing
# them out recurses once per level). A whole reply nested deeper than MAX_TURN_DEPTH is a
# malformed response.
MAX_ARGUMENT_DEPTH = 32
MAX_TURN_DEPTH = 100


def nesting(value: Any) -> tuple[int, bool]:
    """How deeply ``value``'s dicts and lists nest, and whether it holds NaN or an infinity;
    walked without recursion, so a hostile depth costs memory in proportion, not the stack."""
    deepest, non_finite = 0, False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float):
            non_finite = non_finite or not math.isfinite(item)
        elif isinstance(item, dict | list | tuple):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest, non_finite


class ToolCall(BaseModel):
    id: str
    name: str
    args: dict[str, Any] = Field(default_factory=dict)

    @field_validator("args")
    @classmethod
    def _recordable(cls, args: dict[str, Any]) -> dict[str, Any]:
        # NaN and Infinity are not JSON: recorded as they are they would read back as null, so
        # the transcript would show arguments other than those sent. Kept as text instead.
        depth, non_finite = nesting(args)
        if depth > MAX_ARGUMENT_DEPTH:
            return {UNPARSED_ARGUMENTS: f"(arguments nested {depth} levels deep, over "
                                        f"{MAX_ARGUMENT_DEPTH}; not kept)"}
        if non_finite:
            return {UNPARSED_ARGUMENTS: json.dumps(args, allow_nan=True, default=repr)}
        return args


class TokenUsage(BaseModel):
    """As the provider reported it; the ledger sums exactly these numbers (never negative: a
    negative count would buy the session tokens, so it is a malformed response)."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)


class ModelTurn(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    stop_reason: str = ""
    model: str = ""
    # The provider's own content blocks (e.g. Anthropic thinking blocks), sent back verbatim.
    provider_content: list[dict[str, Any]] | None = None


class TransientError(Exception):
    """Worth retrying; ``retry_after`` comes from the server when it said."""

    def __init__(self, detail: str, *, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.retry_after = retry_after


class ProviderError(Exception):
    """Retrying cannot fix it; ``kind`` names it in the session outcome."""

    def __init__(self, kind: str, detail: str, *, status: int | None = None) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.status = status

    @property
    def outcome(self) -> str:
        return f"provider_error:{self.kind}"


class DeadlineReached(Exception):
    """The session's time ran out while calling the model (in flight or waiting to retry)."""


def retry_after_seconds(headers: Any) -> float | None:
    """``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``; None when absent."""
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return float(millis) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


OnEvent = Callable[[str, dict[str, Any]], None]


class Provider(ABC):
    name: str
    retry_policy: RetryPolicy = RetryPolicy()

    def _init_api(self, kind: str, model: str, settings: AgentSettings) -> None:
        """Common set-up of an API provider; a missing key fails before any container."""
        prefix = kind.upper()
        if not os.environ.get(f"{prefix}_API_KEY"):
            raise HarnessError(
                f"{prefix}_API_KEY is not set (the session uses {kind}:{model})",
                f"export {prefix}_API_KEY (and {prefix}_BASE_URL for another endpoint)",
            )
        self.model = model
        self.name = f"{kind}:{model}"
        self.settings = settings
        self.retry_policy = settings.retry

    @abstractmethod
    def _call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
        max_output_tokens: int, timeout_s: float,
    ) -> ModelTurn:
        """One request. Raises TransientError or ProviderError on failure."""

    def request_settings(self) -> dict[str, Any]:
        """The model settings sent with each request (recorded in the transcript)."""
        return {}

    def next_turn(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        max_output_tokens: int,
        *,
        time_left: Callable[[], float] = lambda: float("inf"),
        on_event: OnEvent = lambda _kind, _data: None,
    ) -> ModelTurn:
        """One model turn with retries; raises DeadlineReached or ProviderError.

        The SDKs send UTF-8 JSON, which cannot hold a lone surrogate (a model's own unpaired
        ``\\ud800`` escape, echoed back): it travels as U+FFFD. The transcript keeps the original.
        """
        wire = scrub_surrogates(messages)

        def call(timeout: float) -> ModelTurn:
            try:
                turn = self._call(wire, tools, max_output_tokens, timeout)
                depth, _ = nesting(turn.provider_content)
                if depth > MAX_TURN_DEPTH:
                    raise ProviderError("malformed_response", f"a reply nested {depth} "
                                        f"levels deep (over {MAX_TURN_DEPTH})")
            except (TransientError, ProviderError):
                raise
            except (RecursionError, ValueError, TypeError, KeyError, IndexError,
                    AttributeError, OverflowError) as exc:
                # Whatever the SDK or the parsing of a reply raised on a body nobody can
                # use (nesting past the parser's limit, an integer past Python's digit
                # limit): the provider's garbage, never a harness error.
                raise ProviderError("malformed_response",
                                    f"{type(exc).__name__}: {str(exc)[:300]}") from exc
            return turn

        return call_with_retries(call, self.retry_policy, time_left=time_left,
                                 on_event=on_event)


T = TypeVar("T")


def call_with_retries(call: Callable[[float], T], policy: RetryPolicy, *,
                      time_left: Callable[[], float] = lambda: float("inf"),
                      on_event: OnEvent = lambda _kind, _data: None) -> T:
    """``call(timeout_s)`` under the study's retry policy; raises DeadlineReached or
    ProviderError. The one retry policy of every model call: the loop's providers and the
    gateway that meters a coding-agent CLI's calls both go through here.

    ``call`` raises TransientError (retried) or ProviderError (not); each attempt is reported
    (``model_attempt``) and each wait (``model_retry_wait``), never past the deadline."""
    started = time.monotonic()
    attempt_no = 0

    def attempt() -> T:
        nonlocal attempt_no
        attempt_no += 1
        left = time_left()
        if left <= 0:
            raise DeadlineReached("no time left for a model call")
        timeout = min(policy.request_timeout_s, left)
        t0 = time.monotonic()
        try:
            result = call(timeout)
        except (TransientError, ProviderError) as exc:
            on_event("model_attempt", {
                "attempt": attempt_no, "ok": False, "error": str(exc)[:500],
                "error_type": type(exc).__name__, "status": exc.status,
                "retry_after_s": getattr(exc, "retry_after", None),
                "timeout_s": round(timeout, 3), "duration_s": round(time.monotonic() - t0, 4),
            })
            raise
        on_event("model_attempt", {"attempt": attempt_no, "ok": True,
                                   "timeout_s": round(timeout, 3),
                                   "duration_s": round(time.monotonic() - t0, 4)})
        return result

    backoff = wait_exponential_jitter(multiplier=policy.initial_wait_s, max=policy.max_wait_s,
                                      jitter=policy.jitter_s)

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        server = getattr(exc, "retry_after", None)
        chosen = min(server, policy.max_wait_s) if server is not None else backoff(state)
        return max(0.0, min(chosen, time_left()))

    def stop(state: RetryCallState) -> bool:
        out_of_time = time.monotonic() - started >= policy.max_total_s
        return (stop_after_attempt(policy.max_attempts)(state) or out_of_time
                or time_left() <= 0)

    def before_sleep(state: RetryCallState) -> None:
        wait_s = state.next_action.sleep if state.next_action else 0.0
        on_event("model_retry_wait", {"after_attempt": state.attempt_number,
                                      "wait_s": round(wait_s, 4)})

    retrying = Retrying(retry=retry_if_exception_type(TransientError), wait=wait,
                        stop=stop, before_sleep=before_sleep, reraise=True)
    try:
        return retrying(attempt)
    except TransientError as exc:
        if time_left() <= 0:
            raise DeadlineReached(f"the model did not answer in time ({exc})") from exc
        raise ProviderError("retries_exhausted", f"{attempt_no} attempts: {exc}",
                            status=exc.status) from exc
