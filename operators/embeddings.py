"""Text embeddings through litellm's embedding API, for novelty rejection (``novelty.embedding_model``).

The endpoint and key are the LLM client's (``llm.api_base``, ``llm.api_key_env``/``api_key_file``);
litellm is imported on the first request.  Requests are not counted in ``llm.budget``: an
embedding costs a small fraction of a completion.
"""
from __future__ import annotations

from operators.llm_client import LLMClient, LLMError
from operators.llm_transport import import_litellm

BATCH = 64  # texts per request


class Embeddings:
    def __init__(self, *, model: str, client: LLMClient, timeout_s: float | None = None):
        if not model:
            raise LLMError("novelty.embedding_model must name a model")
        self.model = model
        self.client = client
        self.timeout_s = timeout_s or client.timeout_s

    def __call__(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order; raises :class:`LLMError` (its key scrubbed) on any failure."""
        key = self.client.api_key()
        vectors: list[list[float]] = []
        try:
            litellm = import_litellm()
            for start in range(0, len(texts), BATCH):
                reply = litellm.embedding(model=self.model, input=texts[start:start + BATCH],
                                          api_base=self.client.api_base, api_key=key, timeout=self.timeout_s)
                data = sorted(reply.data, key=lambda item: item["index"])
                vectors.extend([float(x) for x in item["embedding"]] for item in data)
        except Exception as exc:  # litellm maps every provider failure to its own exception types
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            if key and len(key) >= 4:
                error = error.replace(key, "***")
            raise LLMError(f"embedding model {self.model}: {error}") from None
        if len(vectors) != len(texts):
            raise LLMError(f"embedding model {self.model} answered {len(vectors)} vectors for {len(texts)} texts")
        return vectors

