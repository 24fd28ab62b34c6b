"""The LLM client: chat completions through litellm, many in flight, accounted.

One asyncio event loop per process (a daemon thread, started on the first
call) runs every request of every client with ``litellm.acompletion``; a semaphore bounds the
requests in flight (``max_in_flight``).  Island threads call the blocking
:meth:`LLMClient.complete`, which waits on that loop, so many proposals share
one connection pool.  Each attempt is timed and accounted (tokens, dollars
from litellm's cost data or ``prices``) and becomes one ``llm_calls`` row;
429s (honouring Retry-After), 5xx, timeouts and dropped connections are
retried with exponential backoff.

litellm is imported lazily: it takes seconds to import and only runs where an
LLM operator is configured.  The API key is read at call time from the
environment variable ``api_key_env`` or the file ``api_key_file``; it is never
part of the config, the archive or the logs (error texts are scrubbed of it).
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from evo.errors import LLMError
from operators.replies import clean_text

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}

_LOOP: asyncio.AbstractEventLoop | None = None  # the process's one LLM event loop
_LOOP_LOCK = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    """The loop every client of this process runs its requests on (started on first use)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
            import litellm

            litellm.suppress_debug_info = True
            logging.getLogger("LiteLLM").setLevel(logging.ERROR)  # no per-call chatter on our console
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="evo-llm", daemon=True).start()
            _LOOP = loop
        return _LOOP


@dataclass
class Reply:
    """The outcome of one request: its text (None on failure) and one record per attempt."""

    text: str | None
    model: str
    finish_reason: str = ""
    error: str = ""
    calls: list[dict] = field(default_factory=list)  # llm_calls rows: model, tokens, cost, latency, error


def _retry_after(exc: Exception) -> float | None:
    """Seconds from a Retry-After header on a litellm/openai exception, if any."""
    headers = {}
    for source in (getattr(exc, "litellm_response_headers", None), getattr(getattr(exc, "response", None),
                                                                          "headers", None)):
        if source:
            try:
                headers.update({str(k).lower(): v for k, v in dict(source).items()})
            except (TypeError, ValueError):
                pass
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def _status(exc: Exception) -> int | None:
    for name in ("status_code", "status"):
        value = getattr(exc, name, None)
        if isinstance(value, int):
            return value
    return None


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
        return True
    name = type(exc).__name__
    if name in ("Timeout", "APITimeoutError", "APIConnectionError", "RateLimitError", "ServiceUnavailableError",
                "InternalServerError"):
        return True
    status = _status(exc)
    return status in RETRYABLE_STATUS or (status is not None and status >= 500)


class LLMClient:
    """Chat completions against litellm models (hosted, vLLM, Ollama, ...), one or an ensemble."""

    def __init__(self, *, model: str | list[str] | None, api_base: str | None = None,
                 api_key_env: str | None = None, api_key_file: str | None = None, temperature: float = 0.7,
                 max_tokens: int = 4096, timeout_s: float = 120.0, retries: int = 2, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, max_in_flight: int = 32, max_reply_chars: int = 200_000,
                 prices: dict[str, list[float]] | None = None):
        models = [model] if isinstance(model, str) else list(model or [])
        if any(not isinstance(m, str) or not m for m in models) or len(set(models)) != len(models):
            raise LLMError(f"llm.model must be a model name or a list of distinct names, not {model!r}")
        if timeout_s <= 0 or retries < 0 or backoff_s < 0 or max_in_flight < 1 or max_reply_chars < 1:
            raise LLMError("llm.timeout_s and llm.max_in_flight must be positive, llm.retries and "
                           "llm.backoff_s non-negative")
        if api_key_env and api_key_file:
            raise LLMError("set one of llm.api_key_env and llm.api_key_file, not both")
        for name, price in (prices or {}).items():
            if len(price) != 2 or min(price) < 0:
                raise LLMError(f"llm.prices.{name} must be [usd per 1M input tokens, usd per 1M output tokens]")
        self.models = models
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.api_key_file = api_key_file
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = float(timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_in_flight = max_in_flight
        self.max_reply_chars = max_reply_chars
        self.prices = {k: list(v) for k, v in (prices or {}).items()}
        self._unpriced: set[str] = set()  # models litellm has no price for
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphore: asyncio.Semaphore | None = None

    # The event loop and its thread stay in the process that made them (Ray pickles operators).
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_lock=None, _loop=None, _semaphore=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def model(self) -> str | None:
        """The first model (the ensemble's default)."""
        return self.models[0] if self.models else None

    @property
    def enabled(self) -> bool:
        return bool(self.models)

    def _api_key(self) -> str | None:
        if self.api_key_file:
            try:
                return Path(self.api_key_file).expanduser().read_text().strip()
            except OSError as exc:
                raise LLMError(f"llm.api_key_file {self.api_key_file} cannot be read: {exc.strerror}") from None
        if not self.api_key_env:
            # A local server (vLLM, Ollama, ...) needs no key, but OpenAI's client insists on one.
            return None if not self.api_base or os.environ.get("OPENAI_API_KEY") else "no-key"
        key = os.environ.get(self.api_key_env)
        if key is None:
            raise LLMError(f"llm.api_key_env names {self.api_key_env}, which is not set in the environment")
        return key

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = _event_loop()
                self._register_prices()
                self._semaphore = asyncio.Semaphore(self.max_in_flight)  # binds to the loop on first use
            return self._loop

    def complete(self, messages: list[dict], *, model: str | None = None, max_tokens: int | None = None) -> Reply:
        """One request (with retries), blocking this thread; never raises for a model's failure."""
        model = model or self.model
        if model is None:
            raise LLMError("no LLM model is configured: set llm.model")
        try:
            key = self._api_key()
        except LLMError as exc:
            return Reply(None, model, error=str(exc), calls=[self._record(model, 0, error=str(exc))])
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(self._request(model, messages, max_tokens, key), loop)
        return future.result()

    async def _request(self, model: str, messages: list[dict], max_tokens: int | None, key: str | None) -> Reply:
        calls: list[dict] = []
        for attempt in range(self.retries + 1):
            async with self._semaphore:
                reply, retryable, retry_after = await self._attempt(model, messages, max_tokens, key, attempt)
            calls.extend(reply.calls)
            reply.calls = calls
            if reply.text is not None or not retryable or attempt == self.retries:
                return reply
            delay = retry_after if retry_after is not None else self.backoff_s * 2 ** attempt * random.uniform(0.5, 1.5)
            delay = min(delay, self.max_backoff_s)
            calls[-1]["error"] += f" (retrying in {delay:.1f} s)"
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    async def _attempt(self, model: str, messages: list[dict], max_tokens: int | None, key: str | None,
                       attempt: int) -> tuple[Reply, bool, float | None]:
        """One HTTP request: the reply, whether a failure may be retried, and the server's Retry-After."""
        import litellm

        start = time.monotonic()
        try:
            response = await asyncio.wait_for(litellm.acompletion(
                model=model, messages=messages, api_base=self.api_base, api_key=key,
                temperature=self.temperature, max_tokens=max_tokens or self.max_tokens,
                timeout=self.timeout_s, num_retries=0, max_retries=0,
            ), timeout=2 * self.timeout_s + 10)  # a backstop: litellm's own timeout comes first; the
            # first requests of a process also wait for litellm to import its provider modules
        except Exception as exc:  # litellm maps every provider failure to its own exception types
            latency = time.monotonic() - start
            if isinstance(exc, asyncio.TimeoutError):
                error = f"Timeout: no reply within twice llm.timeout_s={self.timeout_s:g}"
            else:
                first = str(exc).splitlines()[0][:300] if str(exc) else ""
                error = f"{type(exc).__name__}: {first}"
            if key and len(key) >= 4:
                error = error.replace(key, "***")
            record = self._record(model, attempt, latency=latency, error=error)
            return Reply(None, model, error=error, calls=[record]), _retryable(exc), _retry_after(exc)
        return self._reply(model, response, time.monotonic() - start, attempt), False, None

    def _reply(self, model: str, response, latency: float, attempt: int) -> Reply:
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost = self._cost(model, response, prompt_tokens, completion_tokens)
        try:
            choice = response.choices[0]
            text, finish = choice.message.content or "", str(getattr(choice, "finish_reason", "") or "")
        except (AttributeError, IndexError, TypeError):
            text, finish = "", ""
        text = clean_text(text)
        error = ""
        if not text.strip():
            error = "empty completion"
        elif finish == "length":
            error = f"truncated: the reply reached max_tokens ({completion_tokens} tokens)"
        elif len(text) > self.max_reply_chars:
            error = f"reply of {len(text)} characters exceeds llm.max_reply_chars={self.max_reply_chars}"
            text = text[: self.max_reply_chars]
        record = self._record(model, attempt, response=text, prompt_tokens=prompt_tokens,
                              completion_tokens=completion_tokens, cost_usd=cost, latency=latency, error=error)
        return Reply(None if error else text, model, finish, error, [record])

    def _register_prices(self) -> None:
        """Teach litellm our prices, so that its own accounting of each call uses them too."""
        if not self.prices:
            return
        import litellm

        litellm.register_model({model: {"input_cost_per_token": price[0] / 1e6, "output_cost_per_token": price[1] / 1e6,
                                        "litellm_provider": model.split("/", 1)[0] if "/" in model else "openai",
                                        "mode": "chat"} for model, price in self.prices.items()})

    def _cost(self, model: str, response, prompt_tokens: int, completion_tokens: int) -> float:
        if model in self.prices:
            per_input, per_output = self.prices[model]
            return (prompt_tokens * per_input + completion_tokens * per_output) / 1e6
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        if cost is not None:  # litellm priced it already, while logging the call
            return float(cost)
        if model in self._unpriced:
            return 0.0
        import litellm

        try:
            return float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # models missing from litellm's price list cost what we cannot know
            self._unpriced.add(model)
            return 0.0

    @staticmethod
    def _record(model: str, attempt: int, *, response: str = "", prompt_tokens: int = 0, completion_tokens: int = 0,
                cost_usd: float = 0.0, latency: float = 0.0, error: str = "") -> dict:
        return {"model": model, "attempt": attempt, "response": response, "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens, "cost_usd": cost_usd, "latency_s": round(latency, 3),
                "error": error}

    def check(self) -> None:
        """Fail early, with a clear message, when an endpoint cannot be used."""
        where = f" at {self.api_base}" if self.api_base else ""
        for model in self.models:
            reply = self.complete([{"role": "user", "content": "Reply with OK."}], model=model, max_tokens=1)
            if reply.text is None and not reply.error.startswith(("truncated", "empty")):
                raise LLMError(f"LLM model {model}{where} is not usable: {reply.error}")
