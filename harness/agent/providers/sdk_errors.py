"""Mapping the official SDKs' exceptions onto TransientError / ProviderError.

Both SDKs share one shape (``APIStatusError`` with ``status_code`` and ``response``,
``APIConnectionError``, ``APITimeoutError``), so one function maps either.
"""

from __future__ import annotations

import json
from types import ModuleType

from harness.agent.providers.base import ProviderError, TransientError, retry_after_seconds

# Statuses worth retrying: rate limits, timeouts and conflicts the server asks us to repeat,
# and every server-side error (Anthropic's 529 "overloaded" included).
RETRY_STATUSES = frozenset({408, 409, 429})


def map_sdk_error(sdk: ModuleType, exc: Exception) -> Exception:
    """The harness error for an SDK exception (returned, for the caller to raise)."""
    if isinstance(exc, sdk.APITimeoutError):
        return TransientError(f"request timed out: {exc}")
    if isinstance(exc, sdk.APIConnectionError):
        return TransientError(f"connection error: {exc.__cause__ or exc}")
    if isinstance(exc, sdk.APIResponseValidationError):
        return ProviderError("malformed_response", str(exc)[:300])
    if isinstance(exc, sdk.APIStatusError):
        status = exc.status_code
        if status in RETRY_STATUSES or status >= 500:
            return TransientError(f"HTTP {status}: {str(exc)[:300]}", status=status,
                                  retry_after=retry_after_seconds(exc.response.headers))
        kind = {401: "auth", 403: "permission", 404: "not_found"}.get(status, "bad_request")
        return ProviderError(kind, f"HTTP {status}: {str(exc)[:300]}", status=status)
    if isinstance(exc, json.JSONDecodeError):  # a body that is not JSON at all
        return ProviderError("malformed_response", f"{type(exc).__name__}: {str(exc)[:300]}")
    return exc  # not an API failure: a bug, raised as it is
