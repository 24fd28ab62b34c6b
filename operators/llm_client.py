"""The LLM client: chat completions, many in flight, accounted.

One asyncio event loop per process (a daemon thread, started on the first
call) runs every request of every client through its transport
(``operators.llm_transport``: litellm, or plain HTTP to an OpenAI-compatible
endpoint); a semaphore bounds the requests in flight (``max_in_flight``).
Island threads call the blocking :meth:`LLMClient.complete`, which waits on
that loop, so many proposals share one connection pool.  Each attempt is timed
and accounted (tokens, dollars from ``prices`` or litellm's cost data) and
becomes one ``llm_calls`` row; 429s (honouring Retry-After), 5xx, timeouts and
dropped connections are retried with exponential backoff.

litellm is imported lazily: it takes seconds to import and only runs where an
LLM operator is configured (on the HTTP transport, only to price models that
``prices`` leaves out).  The API key is read at call time from the
environment variable ``api_key_env`` or the file ``api_key_file``; it is never
part of the config, the archive or the logs (error texts are scrubbed of it).
"""
from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from evo.core.errors import LLMError
from operators.llm_transport import Completion, HTTPTransport, LitellmTransport, Transport, TransportError, choose, \
    import_litellm
from operators.replies import clean_text

_LOOP: asyncio.AbstractEventLoop | None = None  # the process's one LLM event loop
_LOOP_LOCK = threading.Lock()


def _event_loop() -> asyncio.AbstractEventLoop:
    """The loop every client of this process runs its requests on (started on first use)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
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


class LLMClient:
    """Chat completions against litellm models (hosted, vLLM, Ollama, ...), one or an ensemble.

    ``transport``: ``litellm``, ``http`` (an OpenAI-compatible ``api_base``, straight over
    httpx) or ``auto`` (``http`` for ``openai/`` and ``hosted_vllm/`` models with an ``api_base``).
    """

    def __init__(self, *, model: str | list[str] | None, api_base: str | None = None,
                 api_key_env: str | None = None, api_key_file: str | None = None, temperature: float = 0.7,
                 max_tokens: int = 4096, timeout_s: float = 120.0, retries: int = 2, backoff_s: float = 1.0,
                 max_backoff_s: float = 60.0, max_in_flight: int = 32, max_reply_chars: int = 200_000,
                 prices: dict[str, list[float]] | None = None, transport: Transport = "auto"):
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
        self.transport = choose(transport, models, api_base)
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
        self._sender: LitellmTransport | HTTPTransport | None = None
        self._litellm = None  # for prices only, on the HTTP transport

    # The event loop and its thread stay in the process that made them (Ray pickles operators).
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_lock=None, _loop=None, _semaphore=None, _sender=None, _litellm=None)
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

    def api_key(self) -> str | None:
        """The API key, read now from `api_key_file` or `api_key_env` (None: litellm finds it)."""
        if self.api_key_file:
            try:
                return Path(self.api_key_file).expanduser().read_text().strip()
            except OSError as exc:
                raise LLMError(f"llm.api_key_file {self.api_key_file} cannot be read: {exc.strerror}") from None
        if not self.api_key_env:
            if not self.api_base:
                return None  # litellm finds the provider's key itself
            # A local server (vLLM, Ollama, ...) needs no key, but OpenAI's client insists on one.
            # litellm reads OPENAI_API_KEY itself; the HTTP transport is given it.
            env_key = os.environ.get("OPENAI_API_KEY")
            if env_key:
                return env_key if self.transport == "http" else None
            return "no-key"
        key = os.environ.get(self.api_key_env)
        if key is None:
            raise LLMError(f"llm.api_key_env names {self.api_key_env}, which is not set in the environment")
        return key

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                if self.transport == "http":
                    self._sender = HTTPTransport(self.api_base)
                    if any(m not in self.prices for m in self.models):
                        self._litellm = import_litellm()  # its cost map prices the other models
                else:
                    self._sender = LitellmTransport(self.prices)
                    self._litellm = self._sender.litellm
                self._loop = _event_loop()
                self._semaphore = asyncio.Semaphore(self.max_in_flight)  # binds to the loop on first use
            return self._loop

    def complete(self, messages: list[dict], *, model: str | None = None, max_tokens: int | None = None,
                 temperature: float | None = None) -> Reply:
        """One request (with retries), blocking this thread; never raises for a model's failure.
        ``temperature``: this request's, instead of ``llm.temperature``."""
        model = model or self.model
        if model is None:
            raise LLMError("no LLM model is configured: set llm.model")
        try:
            key = self.api_key()
        except LLMError as exc:
            return Reply(None, model, error=str(exc), calls=[self._record(model, 0, error=str(exc))])
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(self._request(model, messages, max_tokens, key, temperature),
                                                  loop)
        return future.result()

    async def _request(self, model: str, messages: list[dict], max_tokens: int | None, key: str | None,
                       temperature: float | None = None) -> Reply:
        calls: list[dict] = []
        for attempt in range(self.retries + 1):
            async with self._semaphore:
                reply, retryable, retry_after = await self._attempt(model, messages, max_tokens, key, attempt,
                                                                    temperature)
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
                       attempt: int, temperature: float | None = None) -> tuple[Reply, bool, float | None]:
        """One HTTP request: the reply, whether a failure may be retried, and the server's Retry-After."""
        start = time.monotonic()
        try:
            done = await asyncio.wait_for(self._sender.send(
                model, messages, api_base=self.api_base, api_key=key,
                temperature=self.temperature if temperature is None else temperature,
                max_tokens=max_tokens or self.max_tokens, timeout_s=self.timeout_s,
            ), timeout=2 * self.timeout_s + 10)  # a backstop: the transport's own timeout comes first; the
            # first requests of a process also wait for litellm to import its provider modules
        except Exception as exc:  # every attempt is a row, whatever failed
            latency = time.monotonic() - start
            if isinstance(exc, TransportError):
                error, retryable, retry_after = str(exc), exc.retryable, exc.retry_after
            elif isinstance(exc, asyncio.TimeoutError):
                error = f"Timeout: no reply within twice llm.timeout_s={self.timeout_s:g}"
                retryable, retry_after = True, None
            else:  # a dropped connection the transport did not name, or a bug in it
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                retryable, retry_after = isinstance(exc, OSError), None
            if key and len(key) >= 4:
                error = error.replace(key, "***")
            record = self._record(model, attempt, latency=latency, error=error)
            return Reply(None, model, error=error, calls=[record]), retryable, retry_after
        return self._reply(model, done, time.monotonic() - start, attempt), False, None

    def _reply(self, model: str, done: Completion, latency: float, attempt: int) -> Reply:
        text, finish, completion_tokens = clean_text(done.text), done.finish_reason, done.completion_tokens
        error = ""
        if not text.strip():
            error = "empty completion"
        elif finish == "length":
            error = f"truncated: the reply reached max_tokens ({completion_tokens} tokens)"
        elif len(text) > self.max_reply_chars:
            error = f"reply of {len(text)} characters exceeds llm.max_reply_chars={self.max_reply_chars}"
            text = text[: self.max_reply_chars]
        record = self._record(model, attempt, response=text, prompt_tokens=done.prompt_tokens,
                              completion_tokens=completion_tokens, cost_usd=self._cost(model, done), latency=latency,
                              error=error)
        return Reply(None if error else text, model, finish, error, [record])

    def _cost(self, model: str, done: Completion) -> float:
        if model in self.prices:
            per_input, per_output = self.prices[model]
            return (done.prompt_tokens * per_input + done.completion_tokens * per_output) / 1e6
        if done.cost_usd is not None:  # litellm priced it already, while logging the call
            return done.cost_usd
        if model in self._unpriced:
            return 0.0
        try:
            return float(sum(self._litellm.cost_per_token(model=model, prompt_tokens=done.prompt_tokens,
                                                          completion_tokens=done.completion_tokens)))
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
