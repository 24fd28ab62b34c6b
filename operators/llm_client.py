"""A thin client over litellm: one chat completion, timed and accounted.

litellm is imported lazily, on the first call: it takes seconds to import and
only runs where an LLM operator is configured.  The API key is read from the
environment variable named by ``api_key_env`` at call time, so it is never
part of the config, the archive or the logs.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from evo.errors import LLMError


@dataclass
class Completion:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0

    def record(self) -> dict:
        return {"model": self.model, "response": self.text, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": self.cost_usd,
                "latency_s": round(self.latency_s, 3), "error": ""}


class LLMClient:
    """Chat completions against any litellm model (hosted, vLLM, Ollama, ...)."""

    def __init__(self, *, model: str | None, api_base: str | None = None, api_key_env: str | None = None,
                 temperature: float = 0.7, max_tokens: int = 4096, timeout_s: float = 120.0,
                 retries: int = 2):
        self.model = model
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.retries = retries

    @property
    def enabled(self) -> bool:
        return bool(self.model)

    def _api_key(self) -> str | None:
        if not self.api_key_env:
            # A local server (vLLM, Ollama, ...) needs no key, but OpenAI's client insists on one.
            return None if not self.api_base or os.environ.get("OPENAI_API_KEY") else "no-key"
        key = os.environ.get(self.api_key_env)
        if key is None:
            raise LLMError(f"llm.api_key_env names {self.api_key_env}, which is not set in the environment")
        return key

    def complete(self, messages: list[dict], *, max_tokens: int | None = None) -> Completion:
        """One completion; raises LLMError with a one-line reason on any failure."""
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network at import
        import litellm

        litellm.suppress_debug_info = True
        start = time.monotonic()
        try:
            response = litellm.completion(
                model=self.model, messages=messages, api_base=self.api_base, api_key=self._api_key(),
                temperature=self.temperature, max_tokens=max_tokens or self.max_tokens,
                timeout=self.timeout_s, num_retries=self.retries,
            )
        except LLMError:
            raise
        except Exception as exc:  # litellm maps every provider failure to its own exception types
            raise LLMError(f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}") from exc
        latency = time.monotonic() - start
        try:
            text = response.choices[0].message.content or ""
        except (AttributeError, IndexError):
            raise LLMError("the completion has no choices") from None
        usage = getattr(response, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # models missing from litellm's price list cost what we cannot know
            cost = 0.0
        return Completion(
            text=text, model=self.model, latency_s=latency, cost_usd=cost,
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
        )

    def check(self) -> None:
        """Fail early, with a clear message, when the endpoint cannot be used."""
        try:
            self.complete([{"role": "user", "content": "Reply with OK."}], max_tokens=1)
        except LLMError as exc:
            where = f" at {self.api_base}" if self.api_base else ""
            raise LLMError(f"LLM model {self.model}{where} is not usable: {exc}") from exc
