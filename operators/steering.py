"""Run-wide LLM steering: budgets, the model ensemble's bandit, repair odds.

The run loop owns one :class:`LLMSteering`: before each proposal it asks for
a model (``begin``), which the budget may refuse; when the proposal returns,
``finish`` charges what its calls cost; when its child is evaluated,
``reward`` tells the bandit whether the child improved on its parent or
filled or improved a cell.  With meta-prompt evolution it also holds the
pool of prompt fragments (``operators.meta_prompt``).  Plain classes: no
litellm, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from evo.core.errors import ConfigError
from operators.meta_prompt import PromptEvolution


@dataclass
class LLMBudget:
    """Limits on dollars, tokens and requests (None: no limit); requests in flight count.

    Each request in flight is charged the most any finished request cost so
    far; while nothing has been measured, only one request runs at a time
    when dollars or tokens are limited.  A request counts once, whatever its
    retries; its retries' tokens and dollars count in full.
    """

    usd: float | None = None
    tokens: int | None = None
    calls: int | None = None
    spent_usd: float = 0.0
    spent_tokens: int = 0
    spent_calls: int = 0
    in_flight: int = 0
    _max_usd: float = 0.0
    _max_tokens: int = 0
    _measured: int = 0  # requests finished in this session

    def __post_init__(self):
        for name in ("usd", "tokens", "calls"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"llm.budget.{name} must be >= 0 or null (no limit), not {value}")

    @property
    def limited(self) -> bool:
        return any(v is not None for v in (self.usd, self.tokens, self.calls))

    def can_start(self) -> bool:
        pending = self.in_flight + 1
        if self.calls is not None and self.spent_calls + pending > self.calls:
            return False
        for limit, spent, most in ((self.usd, self.spent_usd, self._max_usd),
                                   (self.tokens, self.spent_tokens, self._max_tokens)):
            if limit is None:
                continue
            if spent >= limit or (not self._measured and self.in_flight > 0) or spent + pending * most > limit:
                return False
        return True

    @property
    def exhausted(self) -> bool:
        """Nothing may start and nothing is in flight that could free a reservation."""
        return self.in_flight == 0 and not self.can_start()

    def start(self) -> None:
        self.in_flight += 1

    def finish(self, calls: list[dict]) -> None:
        """Release one reservation and charge the calls one request made (none for an offline proposal)."""
        self.in_flight = max(0, self.in_flight - 1)
        if not calls:
            return
        usd = sum(float(c.get("cost_usd") or 0.0) for c in calls)
        tokens = sum(int(c.get("prompt_tokens") or 0) + int(c.get("completion_tokens") or 0) for c in calls)
        self.spent_usd += usd
        self.spent_tokens += tokens
        self.spent_calls += 1
        self._measured += 1
        self._max_usd, self._max_tokens = max(self._max_usd, usd), max(self._max_tokens, tokens)

    def resume(self, spend: dict) -> None:
        """Count what earlier sessions of the run spent (``Archive.llm_spend``: its calls are attempts,
        so a resumed run counts retried requests more than once, never less)."""
        self.spent_usd += float(spend.get("cost_usd", 0.0))
        self.spent_calls += int(spend.get("calls", 0))
        self.spent_tokens += int(spend.get("tokens", 0))

    def status(self) -> dict:
        return {"usd": round(self.spent_usd, 6), "tokens": self.spent_tokens, "calls": self.spent_calls,
                "limits": {"usd": self.usd, "tokens": self.tokens, "calls": self.calls}}


@dataclass
class ModelStats:
    improvements: int = 0
    children: int = 0
    cost_usd: float = 0.0
    requests: int = 0


@dataclass
class ModelEnsemble:
    """Thompson sampling on improvements per dollar over the configured models.

    Each model's chance that a request improves on its parent has a Beta
    posterior; a draw from it is divided by the model's mean cost per request
    (its prior, until it has one, is the mean over all models), so a cheap
    model that improves half as often as a dear one ten times its price wins.
    """

    models: list[str]
    min_cost_usd: float = 1e-6  # free local models compare by improvement rate alone
    stats: dict[str, ModelStats] = field(default_factory=dict)

    def __post_init__(self):
        if not self.models:
            raise ConfigError("the model ensemble needs at least one model (llm.model)")
        self.stats = {m: self.stats.get(m, ModelStats()) for m in self.models}

    def _mean_cost(self, stats: ModelStats) -> float:
        if stats.requests:
            return max(stats.cost_usd / stats.requests, self.min_cost_usd)
        known = [s.cost_usd / s.requests for s in self.stats.values() if s.requests]
        return max(float(np.mean(known)) if known else self.min_cost_usd, self.min_cost_usd)

    def choose(self, rng: np.random.Generator) -> str:
        if len(self.models) == 1:
            return self.models[0]
        scores = [rng.beta(1 + s.improvements, 1 + s.children - s.improvements) / self._mean_cost(s)
                  for s in (self.stats[m] for m in self.models)]
        return self.models[int(np.argmax(scores))]

    def charge(self, model: str, cost_usd: float) -> None:
        stats = self.stats.setdefault(model, ModelStats())
        stats.requests += 1
        stats.cost_usd += cost_usd

    def reward(self, model: str, improved: bool) -> None:
        stats = self.stats.setdefault(model, ModelStats())
        stats.children += 1
        stats.improvements += int(improved)


class LLMSteering:
    """What the run loop needs to spend an LLM budget well."""

    def __init__(self, *, models: list[str], budget: LLMBudget | None = None, repair_probability: float = 0.0,
                 offline_operators: bool = True, prompts: PromptEvolution | None = None):
        if not 0.0 <= repair_probability <= 1.0:
            raise ConfigError("the repair probability must be between 0 and 1")
        self.ensemble = ModelEnsemble(list(models))
        self.budget = budget or LLMBudget()
        self.repair_probability = repair_probability
        self.offline_operators = offline_operators
        self.prompts = prompts  # evolving prompt fragments, when meta-prompt evolution is on

    def begin(self, rng: np.random.Generator) -> str | None:
        """The model for the next proposal (one request reserved), or None when the budget refuses."""
        if not self.budget.can_start():
            return None
        self.budget.start()
        return self.ensemble.choose(rng)

    def finish(self, model: str | None, calls: list[dict]) -> None:
        """A proposal begun with ``model`` came back with ``calls`` (empty if it made none)."""
        if model is None:
            return
        self.budget.finish(calls)
        if calls:
            self.ensemble.charge(calls[-1].get("model", model), sum(float(c.get("cost_usd") or 0) for c in calls))

    def may_propose(self) -> bool:
        """False when no proposal can start: the budget is spent and no offline operator is left."""
        return self.offline_operators or not self.budget.exhausted
