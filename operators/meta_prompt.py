"""Meta-prompt evolution: prompt fragments that co-evolve with the kernels they produce.

A fragment is a few sentences of advice that an LLM prompt carries under
"Guidance".  The pool starts from seed fragments (``operators/prompts/
fragments.txt`` or a file of the user's); the run loop picks one for each
LLM proposal by Thompson sampling on the share of its children that improved
(the reward the model bandit gets: the child beat its parent, or filled or
improved a cell), and a proposal that yields no child counts as a failure.
Every ``evolve_every`` rewards a new fragment is bred from two good ones:
their sentences crossed, then one mutation (a sentence dropped, or one added
from the library of every sentence seen).  Past ``max_fragments`` the worst
fragment leaves the pool, among those tried ``min_trials`` times or doing
worse than the pool's average (never the best one).

Plain Python and JSON state: the run loop saves it with its RNG state in the
transaction of every change it commits, so a resumed run goes on with the
same pool and scores.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from evo.core.errors import ConfigError

DEFAULT_FRAGMENTS = Path(__file__).parent / "prompts" / "fragments.txt"
STATE_KEY = "meta_prompt.pool"  # the archive's meta key of the pool's state (saved by the run loop)
MAX_SENTENCE_CHARS = 400


@dataclass
class Fragment:
    id: int
    sentences: list[str]
    parents: list[int] = field(default_factory=list)  # the fragments it was bred from (none for a seed)
    children: int = 0  # children rewarded (proposals without a child included)
    improvements: int = 0

    @property
    def text(self) -> str:
        return "\n".join(f"- {s}" for s in self.sentences)


def read_fragments(path: str | Path) -> list[list[str]]:
    """Seed fragments from a text file: one sentence per line, a blank line between fragments, # comments."""
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        raise ConfigError(f"meta_prompt.fragments {path} cannot be read: {exc.strerror}") from None
    fragments, current = [], []
    for line in [*text.splitlines(), ""]:
        line = line.strip()
        if line.startswith("#"):
            continue
        if line:
            if len(line) > MAX_SENTENCE_CHARS:
                raise ConfigError(f"meta_prompt.fragments {path}: a sentence of {len(line)} characters "
                                  f"(at most {MAX_SENTENCE_CHARS}): {line[:60]}...")
            current.append(line)
        elif current:
            fragments.append(current)
            current = []
    if len(fragments) < 2:
        raise ConfigError(f"meta_prompt.fragments {path} holds {len(fragments)} fragment(s); evolution needs "
                          "at least 2 (a blank line between fragments)")
    return fragments


class PromptEvolution:
    def __init__(self, *, fragments: str | None = None, evolve_every: int = 16, max_fragments: int = 16,
                 min_trials: int = 4, max_sentences: int = 4):
        if evolve_every < 1 or min_trials < 1 or max_sentences < 1:
            raise ConfigError("meta_prompt.evolve_every, min_trials and max_sentences must be >= 1")
        seeds = read_fragments(fragments or DEFAULT_FRAGMENTS)
        if max_fragments < len(seeds):
            raise ConfigError(f"meta_prompt.max_fragments={max_fragments} is below the {len(seeds)} seed fragments")
        self.evolve_every, self.max_fragments = evolve_every, max_fragments
        self.min_trials, self.max_sentences = min_trials, max_sentences
        self.fragments = [Fragment(i, s[:max_sentences]) for i, s in enumerate(seeds)]
        self.library = list(dict.fromkeys(s for f in seeds for s in f))  # every sentence, in order
        self.next_id = len(self.fragments)
        self.rewards = 0  # rewards since the last new fragment

    # -- the run loop's calls ----------------------------------------------------
    def _prior(self) -> tuple[float, float]:
        return _prior(self.fragments)

    def mean(self, fragment: Fragment) -> float:
        return _mean(fragment, self._prior())

    def choose(self, rng: np.random.Generator) -> Fragment:
        """The fragment for the next proposal: Thompson sampling on its improvement rate."""
        a, b = self._prior()
        draws = [rng.beta(a + f.improvements, b + f.children - f.improvements) for f in self.fragments]
        return self.fragments[int(np.argmax(draws))]

    def reward(self, fragment_id: int, improved: bool, rng: np.random.Generator) -> Fragment | None:
        """Score a fragment's child; returns the fragment bred now, if one was."""
        fragment = self._by_id(fragment_id)
        if fragment is None:  # pruned while its child was under way
            return None
        fragment.children += 1
        fragment.improvements += int(improved)
        self.rewards += 1
        if self.rewards < self.evolve_every:
            return None
        self.rewards = 0
        return self._breed(rng)

    # -- evolution ---------------------------------------------------------------
    def _by_id(self, fragment_id: int) -> Fragment | None:
        return next((f for f in self.fragments if f.id == fragment_id), None)

    def _leaving(self) -> Fragment | None:
        """The fragment a full pool drops for a new one: the worst of those tried ``min_trials`` times
        or doing worse than the pool on average, never the best one (None: no fragment qualifies)."""
        prior = self._prior()
        average = prior[0] / sum(prior)
        best = max(self.fragments, key=lambda f: (_mean(f, prior), -f.id))
        candidates = [f for f in self.fragments if f is not best
                      and (f.children >= self.min_trials or _mean(f, prior) < average)]
        return min(candidates, key=lambda f: (_mean(f, prior), -f.id)) if candidates else None

    def _tournament(self, rng: np.random.Generator, exclude: int | None = None) -> Fragment:
        pool = [f for f in self.fragments if f.id != exclude]
        a, b = (pool[int(i)] for i in rng.choice(len(pool), size=2, replace=len(pool) < 2))
        return a if self.mean(a) >= self.mean(b) else b

    def _breed(self, rng: np.random.Generator) -> Fragment | None:
        """A new fragment from two good ones, or None (nothing new came out, or the pool is full of
        fragments not yet tried enough to tell which one should leave)."""
        full = len(self.fragments) >= self.max_fragments
        leaving = self._leaving() if full else None
        if full and leaving is None:
            return None
        first = self._tournament(rng)
        second = self._tournament(rng, exclude=first.id)
        genes = list(dict.fromkeys(first.sentences + second.sentences))
        keep = [s for s in genes if rng.random() < 0.5] or [genes[int(rng.integers(len(genes)))]]
        unused = [s for s in self.library if s not in keep]
        if (rng.random() < 0.5 or len(keep) == 1) and unused and len(keep) < self.max_sentences:
            keep.insert(int(rng.integers(len(keep) + 1)), unused[int(rng.integers(len(unused)))])
        elif len(keep) > 1:
            keep.pop(int(rng.integers(len(keep))))
        keep = keep[: self.max_sentences]
        if any(sorted(keep) == sorted(f.sentences) for f in self.fragments):
            return None  # already in the pool
        if full:
            self.fragments.remove(leaving)
        child = Fragment(self.next_id, keep, parents=[first.id, second.id])
        self.next_id += 1
        self.fragments.append(child)
        return child

    # -- state ---------------------------------------------------------------------
    def state(self) -> dict:
        return {"fragments": [asdict(f) for f in self.fragments], "library": self.library,
                "next_id": self.next_id, "rewards": self.rewards}

    def restore(self, state: dict) -> None:
        self.fragments = [Fragment(**f) for f in state["fragments"]]
        self.library = list(state["library"])
        self.next_id, self.rewards = int(state["next_id"]), int(state["rewards"])

    def table(self) -> list[dict]:
        return table(self.state())


def _prior(fragments: list[Fragment]) -> tuple[float, float]:
    """Beta pseudo-counts: two trials at the pool's own improvement rate (improvements are rare,
    and a uniform prior would keep favouring untried fragments over proven ones)."""
    children = sum(f.children for f in fragments)
    rate = sum(f.improvements for f in fragments) / children if children else 0.5
    return 0.5 + 2 * rate, 0.5 + 2 * (1 - rate)


def _mean(fragment: Fragment, prior: tuple[float, float]) -> float:
    return (prior[0] + fragment.improvements) / (sum(prior) + fragment.children)


def table(state: dict) -> list[dict]:
    """A saved pool, best first (posterior mean improvement rate): for `evo status` and the tests."""
    fragments = [Fragment(**f) for f in state["fragments"]]
    prior = _prior(fragments)
    ranked = sorted(fragments, key=lambda f: (-_mean(f, prior), f.id))
    return [{"id": f.id, "children": f.children, "improvements": f.improvements, "parents": f.parents,
             "rate": _mean(f, prior), "text": " ".join(f.sentences)} for f in ranked]
