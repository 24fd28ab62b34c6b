"""Novelty rejection before evaluation: a child that near-duplicates a program of its task is not evaluated.

The rule is ``evo.core.novelty``'s.  This keeps each task's fingerprints (and, with
``novelty.embedding_model``, its programs' embeddings), brought up to date from the archive when a
child of the task comes: a resumed run compares with every program its archive holds, and so does
a run whose programs other code added (seeds, offline children), those under evaluation included.
A program is fingerprinted once per session; an accepted child's fingerprint and vector are kept
for its program, so it is not analysed twice.

With an embedding model, rules 1 and 2 (a renamed copy, a constants variant) are still the tokens';
rules 3 and 4 give way to the cosine similarity of the two sources' embeddings.  The requests are
made on the run loop's thread, one per child judged and batches for programs not embedded yet;
after a failed one the session goes on with token similarity (the event ``novelty_embedding_failed``).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from archive import Archive
from evo.core.novelty import (
    Fingerprint,
    FingerprintIndex,
    NoveltySettings,
    Resemblance,
    fingerprint,
)

Embed = Callable[[list[str]], list[list[float]]]


def _no_events(kind: str, **fields) -> None:
    pass


class _Vectors:
    """One task's programs' embeddings, as unit rows of a matrix."""

    def __init__(self):
        self.ids: list[int] = []
        self.rows = np.zeros((0, 0))
        self.waiting: list[tuple[int, str]] = []  # (id, source) of programs not embedded yet

    def add(self, ids: list[int], vectors) -> None:
        if not ids:
            return
        rows = np.asarray(vectors, dtype=float)
        rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        self.rows = rows if not self.ids else np.vstack([self.rows, rows])
        self.ids.extend(ids)

    def nearest(self, vector) -> tuple[int, float] | None:
        if not self.ids:
            return None
        unit = np.asarray(vector, dtype=float)
        cosines = self.rows @ (unit / max(float(np.linalg.norm(unit)), 1e-12))
        best = int(np.argmax(cosines))
        return self.ids[best], float(cosines[best])


class NoveltyFilter:
    def __init__(self, settings: NoveltySettings, archive: Archive, *, embed: Embed | None = None,
                 events: Callable[..., None] = _no_events):
        self.settings = settings
        self.archive = archive
        self.embed = embed if settings.embedding_model else None
        self.events = events
        self._index: dict[str, FingerprintIndex] = {}
        self._vectors: dict[str, _Vectors] = {}
        self._newest: dict[str, int] = {}  # task -> the newest program id taken in
        self._accepted: dict[str, tuple[Fingerprint, list[float] | None]] = {}  # source -> what its judging found

    def check(self, task: str, operator: str, source: str) -> Resemblance | None:
        """The program of ``task`` that this child of ``operator`` near-duplicates, if it is judged
        (``novelty.operators``) and is one; None lets it be evaluated."""
        if not self.settings.applies_to(operator):
            return None
        child = fingerprint(source)
        if child is None:  # it does not parse: the evaluator says why
            return None
        index = self._catch_up(task)
        found, vector = None, None
        if self.embed is None:
            found = index.resembled(child, self.settings.threshold)
        elif (found := index.twin(child)) is None and not index.variant_of(child):  # rules 1, 2: the tokens
            found, vector = self._by_embedding(task, index, child, source)
        if found is None:
            self._accepted[source] = (child, vector)
        return found

    def rejected(self, found: Resemblance, task: str, island: int, operator: str, llm_calls: list[dict]) -> None:
        """Record a child not evaluated, with the requests that made it (one transaction): ``evo status``
        counts it, for the operator's success rate too, after a resume as well."""
        self.archive.record_rejection(task=task, island=island, operator=operator, resembles=found.program_id,
                                      similarity=found.similarity, measure=found.measure, llm_calls=llm_calls)

    def _catch_up(self, task: str) -> FingerprintIndex:
        """The task's index, with the programs added to the archive since the last look."""
        index = self._index.setdefault(task, FingerprintIndex())
        vectors = self._vectors.setdefault(task, _Vectors())
        rows = self.archive.sources_after(task, self._newest.get(task, 0))
        for pid, source in rows:
            fp, vector = self._accepted.pop(source, (None, None))
            fp = fp or fingerprint(source)
            if fp is not None:
                index.add(pid, fp)
            if self.embed is not None:
                if vector is not None:
                    vectors.add([pid], [vector])
                else:
                    vectors.waiting.append((pid, source))
        if rows:
            self._newest[task] = rows[-1][0]
        return index

    def _by_embedding(self, task: str, index: FingerprintIndex, child: Fingerprint,
                      source: str) -> tuple[Resemblance | None, list[float] | None]:
        """Rules 3 and 4 by the embeddings' cosine: the nearest program at or above the threshold."""
        vectors = self._vectors[task]
        waiting = vectors.waiting
        try:
            found = self.embed([s for _, s in waiting] + [source])
        except Exception as exc:  # the endpoint failed: token similarity for the rest of the session
            self.embed = None
            self.events("novelty_embedding_failed", model=self.settings.embedding_model, reason=str(exc)[:500])
            return index.resembled(child, self.settings.threshold), None
        vectors.add([pid for pid, _ in waiting], found[:-1])
        vectors.waiting = []
        nearest = vectors.nearest(found[-1])
        if nearest is not None and nearest[1] >= self.settings.threshold:
            return Resemblance(nearest[0], nearest[1], "embedding"), None
        return None, found[-1]
