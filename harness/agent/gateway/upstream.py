"""The real provider behind the gateway: where it is, the key only the host holds, and one
forwarded HTTP request bounded in time and size.

The CLI's own credential is a placeholder; the gateway drops every header it was not told to
pass and adds the provider's key here, so the key exists in the harness process alone.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import requests
from pydantic import BaseModel, ConfigDict, SecretStr

from harness.agent.gateway.apis import ApiName
from harness.agent.providers.base import ProviderError, TransientError, retry_after_seconds
from harness.errors import HarnessError

# No answer of a model is near this; a larger body is cut off and the call fails.
MAX_RESPONSE_BYTES = 64 * 1024**2
RETRY_STATUSES = frozenset({408, 409, 429})
# The request headers a provider needs from the CLI (its API version and feature flags);
# every other header, the CLI's credential included, stays behind.
FORWARDED_HEADERS = frozenset({"content-type", "accept", "anthropic-version", "anthropic-beta",
                               "openai-beta", "user-agent"})
DEFAULT_BASE_URLS = {"anthropic": "https://api.anthropic.com", "openai": "https://api.openai.com/v1"}


class Upstream(BaseModel):
    """Where the gateway forwards model calls, and with which key."""

    model_config = ConfigDict(frozen=True)

    provider: str  # anthropic | openai
    base_url: str  # the provider's base URL: Anthropic without /v1, OpenAI with it
    key: SecretStr

    def url(self, path: str, query: str) -> str:
        base = self.base_url.rstrip("/")
        # OpenAI's base URL carries /v1 (as the SDK's OPENAI_BASE_URL does); the CLI's path
        # does too.
        if self.provider == "openai" and base.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        return base + path + (f"?{query}" if query else "")

    def auth_headers(self) -> dict[str, str]:
        secret = self.key.get_secret_value()
        if self.provider == "anthropic":
            return {"x-api-key": secret}
        return {"authorization": f"Bearer {secret}"}


def upstream_from_environment(provider: str, model: str) -> Upstream:
    """The provider's endpoint and key from ``<PROVIDER>_API_KEY`` / ``<PROVIDER>_BASE_URL``
    (as the loop's providers read them); a missing key fails before any container."""
    prefix = provider.upper()
    key = os.environ.get(f"{prefix}_API_KEY")
    if not key:
        raise HarnessError(f"{prefix}_API_KEY is not set (the session uses {provider}:{model})",
                           f"export {prefix}_API_KEY (and {prefix}_BASE_URL for another "
                           "endpoint); it stays on the host, in the gateway")
    base = os.environ.get(f"{prefix}_BASE_URL") or DEFAULT_BASE_URLS[provider]
    return Upstream(provider=provider, base_url=base, key=SecretStr(key))


@dataclass
class UpstreamReply:
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str]


def forward_once(upstream: Upstream, api: ApiName, path: str, query: str,
                 headers: dict[str, str], body: bytes, timeout_s: float) -> UpstreamReply:
    """One request to the provider. Raises TransientError for what a retry may fix (429, 5xx,
    408, 409, connection failures, timeouts); returns every other answer, 4xx included."""
    sent = {k: v for k, v in headers.items() if k.lower() in FORWARDED_HEADERS}
    sent.update(upstream.auth_headers())
    sent["content-type"] = "application/json"
    deadline = time.monotonic() + timeout_s
    try:
        response = requests.post(upstream.url(path, query), data=body, headers=sent,
                                 stream=True, timeout=(min(30.0, timeout_s), timeout_s))
    except requests.Timeout as exc:
        raise TransientError(f"request timed out: {exc}") from None
    except requests.RequestException as exc:
        raise TransientError(f"connection error: {type(exc).__name__}: {exc}"[:300]) from None
    try:
        status = response.status_code
        if status in RETRY_STATUSES or status >= 500:
            detail = response.raw.read(2000, decode_content=True).decode("utf-8", "replace")
            raise TransientError(f"HTTP {status}: {detail[:300]}", status=status,
                                 retry_after=retry_after_seconds(response.headers))
        chunks, size = [], 0
        for chunk in response.iter_content(64 * 1024):
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES:
                raise ProviderError("malformed_response",
                                    f"the answer is over {MAX_RESPONSE_BYTES} bytes", status=status)
            if time.monotonic() > deadline:
                raise TransientError(f"the answer took over {timeout_s:.0f} s")
            chunks.append(chunk)
        return UpstreamReply(status=status,
                             content_type=response.headers.get("content-type", ""),
                             body=b"".join(chunks),
                             headers={k.lower(): v for k, v in response.headers.items()})
    except requests.RequestException as exc:
        raise TransientError(f"connection error while reading: {type(exc).__name__}: "
                             f"{exc}"[:300]) from None
    finally:
        response.close()
