"""What the run loop saves with every change it commits, and what a start restores from the archive:
its RNG's state, the proposals started so far (each island seeds a proposal's RNG with its number),
the prompt fragments and their scores (meta-prompt evolution) and the LLM seeding attempts.  Saved
in the same transaction as the program or evaluation they led to, so a resumed run draws on from
the last committed change (tests/test_rng_resume.py)."""
from __future__ import annotations

import json

import numpy as np

from evo.loop.seeding import ATTEMPTS_META, Seeding
from operators.meta_prompt import (
    STATE_KEY as PROMPTS_STATE,  # the fragments and their scores
)

RNG_META = "rng.controller"  # the run loop's RNG state, saved with every program and evaluation it led to
SEQUENCE_META = "rng.proposals"  # proposals started so far: each island seeds a proposal's RNG with its number


class LoopState:
    """The run loop's ``rng``, its proposal count and what ``prompts`` and ``seeding`` (either may be
    None) keep, as archive meta entries."""

    def __init__(self, rng: np.random.Generator, prompts=None, seeding: Seeding | None = None):
        self.rng, self.prompts, self.seeding = rng, prompts, seeding
        self.sequence = 0  # proposals started in this run, resumes included

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def meta(self) -> dict[str, str]:
        """The entries to commit with a change."""
        meta = {RNG_META: json.dumps(self.rng.bit_generator.state), SEQUENCE_META: str(self.sequence)}
        if self.prompts is not None:
            meta[PROMPTS_STATE] = json.dumps(self.prompts.state())
        if self.seeding is not None:
            meta.update(self.seeding.meta())
        return meta

    def restore(self, archive) -> None:
        """Continue where the last committed change left off (nothing on a new run)."""
        state = archive.get_meta(RNG_META)
        if state is not None:
            self.rng.bit_generator.state = json.loads(state)
        self.sequence = int(archive.get_meta(SEQUENCE_META) or 0)
        pool = archive.get_meta(PROMPTS_STATE)
        if pool is not None and self.prompts is not None:
            self.prompts.restore(json.loads(pool))
        if self.seeding is not None:
            self.seeding.restore(archive.get_meta(ATTEMPTS_META))
