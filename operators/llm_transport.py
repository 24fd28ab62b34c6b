"""How one chat-completion request reaches its endpoint: through litellm, or plain HTTP.

``LitellmTransport`` speaks to every provider litellm knows (hosted APIs, vLLM,
Ollama, ...).  ``HTTPTransport`` posts straight to an OpenAI-compatible
``{api_base}/chat/completions`` with aiohttp: a few hundred microseconds of CPU
per request where litellm spends milliseconds on the one event-loop thread
(``experiments/proposal_rate_bench.md``).  ``choose`` resolves ``llm.transport``
(``auto`` takes HTTP for ``openai/`` and ``hosted_vllm/`` models with an
``api_base``).

Both return a ``Completion`` or raise ``TransportError``, which says whether
the failure may be retried and how long the server asked us to wait; the
client (``operators.llm_client``) does the retries, timing and accounting.
"""
from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
from dataclasses import dataclass
from typing import Literal, get_args
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}
Transport = Literal["auto", "litellm", "http"]
DIRECT_PREFIXES = ("openai/", "hosted_vllm/")  # litellm's names for OpenAI-compatible servers
_ERROR_NAMES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                404: "NotFoundError", 408: "Timeout", 422: "UnprocessableEntityError", 429: "RateLimitError",
                503: "ServiceUnavailableError"}  # litellm's names, so errors read the same either way


def choose(transport: Transport, models: list[str], api_base: str | None) -> Literal["litellm", "http"]:
    """``litellm`` or ``http`` for ``llm.transport``; a bad value is an error."""
    from evaluator.choices import one_of
    from evo.core.errors import LLMError

    one_of("llm.transport", transport, get_args(Transport), LLMError)
    if transport == "http" and not api_base:
        raise LLMError("llm.transport=http needs llm.api_base (an OpenAI-compatible endpoint)")
    if transport == "auto":
        direct = api_base and models and all(m.startswith(DIRECT_PREFIXES) for m in models)
        return "http" if direct else "litellm"
    return transport


@dataclass
class Completion:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None = None  # what the transport priced it at (litellm does, while logging)


class TransportError(Exception):
    """A failed attempt: ``kind`` (litellm's exception names), whether to retry, the server's Retry-After."""

    def __init__(self, kind: str, message: str, *, retryable: bool, retry_after: float | None = None):
        super().__init__(f"{kind}: {message}")
        self.retryable, self.retry_after = retryable, retry_after


def import_litellm():
    """litellm, imported on first use (it takes seconds), quiet and without network at import."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    logging.getLogger("LiteLLM").setLevel(logging.ERROR)  # no per-call chatter on our console
    return litellm


def retry_after(headers) -> float | None:
    """Seconds from Retry-After (or retry-after-ms) headers, if any; an HTTP date gives None (our backoff)."""
    try:
        headers = {str(k).lower(): v for k, v in dict(headers or {}).items()}
    except (TypeError, ValueError):
        return None
    for name, scale in (("retry-after-ms", 1000), ("retry-after", 1)):
        try:
            if headers.get(name) is not None:
                return max(0.0, float(headers[name]) / scale)
        except ValueError:
            pass
    return None


def _status(exc: Exception) -> int | None:
    for name in ("status_code", "status"):
        value = getattr(exc, name, None)
        if isinstance(value, int):
            return value
    return None


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, (TimeoutError, ConnectionError)):
        return True
    if type(exc).__name__ in ("Timeout", "APITimeoutError", "APIConnectionError", "RateLimitError",
                              "ServiceUnavailableError", "InternalServerError"):
        return True
    status = _status(exc)
    return status in RETRYABLE_STATUS or (status is not None and status >= 500)


class LitellmTransport:
    """``litellm.acompletion``: any provider litellm supports."""

    def __init__(self, prices: dict[str, list[float]]):
        self.litellm = import_litellm()
        if prices:  # litellm's own accounting of each call uses our prices too
            self.litellm.register_model({
                model: {"input_cost_per_token": price[0] / 1e6, "output_cost_per_token": price[1] / 1e6,
                        "litellm_provider": model.split("/", 1)[0] if "/" in model else "openai", "mode": "chat"}
                for model, price in prices.items()})

    async def send(self, model: str, messages: list[dict], *, api_base: str | None, api_key: str | None,
                   temperature: float, max_tokens: int, timeout_s: float) -> Completion:
        try:
            response = await self.litellm.acompletion(
                model=model, messages=messages, api_base=api_base, api_key=api_key, temperature=temperature,
                max_tokens=max_tokens, timeout=timeout_s, num_retries=0, max_retries=0)
        except Exception as exc:  # litellm maps every provider failure to its own exception types
            headers = {}
            for source in (getattr(exc, "litellm_response_headers", None),
                           getattr(getattr(exc, "response", None), "headers", None)):
                try:
                    headers.update(dict(source or {}))
                except (TypeError, ValueError):
                    pass
            first = str(exc).splitlines()[0][:300] if str(exc) else ""
            raise TransportError(type(exc).__name__, first, retryable=_retryable(exc),
                                 retry_after=retry_after(headers)) from None
        usage = getattr(response, "usage", None)
        try:
            choice = response.choices[0]
            text, finish = choice.message.content or "", str(getattr(choice, "finish_reason", "") or "")
        except (AttributeError, IndexError, TypeError):
            text, finish = "", ""
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        return Completion(text, finish, int(getattr(usage, "prompt_tokens", 0) or 0),
                          int(getattr(usage, "completion_tokens", 0) or 0), None if cost is None else float(cost))


class HTTPTransport:
    """POST ``{api_base}/chat/completions`` with aiohttp: an OpenAI-compatible server, nothing in between.

    aiohttp, not httpx: 0.4 ms of CPU per request against httpx's 2 to 4 ms
    (experiments/proposal_rate_bench.md).  The process's one session (its
    connections kept alive) is made on the event loop at the first request and
    closed at exit; the semaphore of each client bounds the requests in flight.
    """

    def __init__(self, api_base: str):
        self.url = api_base.rstrip("/") + "/chat/completions"
        # A proxy from the environment (HTTP(S)_PROXY, NO_PROXY), as httpx and litellm have it; looked up
        # once here, where aiohttp's trust_env would read the environment and ~/.netrc at every request.
        parts = urlsplit(self.url)
        self.proxy = None if proxy_bypass(parts.hostname or "") else getproxies().get(parts.scheme)

    async def send(self, model: str, messages: list[dict], *, api_base: str | None, api_key: str | None,
                   temperature: float, max_tokens: int, timeout_s: float) -> Completion:
        import aiohttp

        name = model.split("/", 1)[1] if model.startswith(DIRECT_PREFIXES) else model
        body = json.dumps({"model": name, "messages": messages, "temperature": temperature,
                           "max_tokens": max_tokens}).encode()
        headers = {"Content-Type": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        try:
            async with _session().post(self.url, data=body, headers=headers, proxy=self.proxy,
                                       timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
                status, raw, reply_headers = response.status, await _bounded_body(response), response.headers
        except asyncio.TimeoutError:
            raise TransportError("Timeout", f"no reply within llm.timeout_s={timeout_s:g}", retryable=True) from None
        except (aiohttp.ClientError, OSError) as exc:  # refused, dropped or reset connections, protocol errors
            raise TransportError("APIConnectionError", f"{type(exc).__name__}: {exc}"[:300], retryable=True) from None
        if raw is None:  # the connection is dropped with the rest unread
            raise TransportError("APIError", f"a reply body past {MAX_REPLY_BYTES >> 20} MiB (HTTP {status})",
                                 retryable=False)
        try:
            data = json.loads(raw.decode("utf-8"))
        except ValueError as exc:  # not UTF-8, not JSON: as litellm has it, a server error (retried)
            if status < 400:
                raise TransportError("InternalServerError", str(exc)[:300], retryable=True) from None
            data = None
        if status >= 400:
            error = data.get("error") if isinstance(data, dict) else None
            message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
            message = str(message or raw.decode("utf-8", "replace") or f"HTTP {status}").splitlines()[0][:300]
            kind = _ERROR_NAMES.get(status, "InternalServerError" if status >= 500 else "APIStatusError")
            raise TransportError(kind, f"{message} (HTTP {status})",
                                 retryable=status in RETRYABLE_STATUS or status >= 500,
                                 retry_after=retry_after(reply_headers))
        try:
            choice = data["choices"][0]
            text, finish = choice["message"].get("content") or "", str(choice.get("finish_reason") or "")
        except (KeyError, IndexError, TypeError, AttributeError):
            text, finish = "", ""
        usage = data.get("usage") if isinstance(data, dict) else None
        return Completion(text if isinstance(text, str) else "", finish, _count(usage, "prompt_tokens"),
                          _count(usage, "completion_tokens"))


# A reply body is read no further than this: a server streaming gigabytes would hold them all in memory
# (llm.max_reply_chars bounds the text after it is parsed; JSON's escapes take at most 6 bytes a character).
MAX_REPLY_BYTES = 64 << 20


async def _bounded_body(response) -> bytes | None:
    """The reply's body, or None where it runs past MAX_REPLY_BYTES."""
    if (response.content_length or 0) > MAX_REPLY_BYTES:
        return None
    parts, size = [], 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _count(usage, name: str) -> int:
    try:
        return int(usage.get(name) or 0)
    except (AttributeError, TypeError, ValueError):
        return 0


_SESSION = None  # the process's aiohttp session, on the LLM event loop


def _session():
    global _SESSION
    if _SESSION is None or _SESSION.closed:
        import aiohttp

        # No limit of its own: each client's semaphore is one.
        _SESSION = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        atexit.register(_close, _SESSION, asyncio.get_running_loop())
    return _SESSION


def _close(session, loop: asyncio.AbstractEventLoop) -> None:
    """Close the session on its loop at exit (else aiohttp complains of an unclosed session)."""
    if not session.closed and loop.is_running():
        try:
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=2)
        except Exception:  # exiting anyway
            pass
