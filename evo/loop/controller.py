"""The run loop: steady state, no generation barrier, one owner of the archive.

Proposals (island actors) and evaluations (in the evaluators' slots) run
concurrently through the backend's futures; this loop alone writes to the
archive, so every state change is one transaction from one writer.

With LLM operators, an :class:`operators.steering.LLMSteering` picks each
proposal's model and holds the budgets (proposing stops cleanly when they
are spent), learns from which children improved, and schedules the repair
of failed children (at most one attempt each, with a set probability).  A task
without a correct program is asked seed proposals (no parent) while ``evo.loop.seeding``
allows, and set aside when none can come.  A task at its ``run.budget.per_task`` children is given
no proposal (``evo.loop.task_budget``).
"""
from __future__ import annotations

import itertools
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Callable, NamedTuple

import numpy as np

from archive import Archive, Insert
from evaluator import EvalResult, Status
from evo.core.inspiration import BestThenRandom, Inspiration
from evo.core.kernel_source import normalized_hash
from evo.core.program import SEED, SEED_OPERATORS, Program
from evo.core.selection import Selection, Uniform
from evo.core.task import Task
from evo.loop.arrivals import TaskArrivals
from evo.loop.feedback import Feedback
from evo.loop.late_baselines import LateBaselines
from evo.loop.loop_state import LoopState
from evo.loop.novelty import NoveltyFilter
from evo.loop.pacing import Pacing, switch_interval
from evo.loop.readiness import Readiness
from evo.loop.run_settings import RunSettings
from evo.loop.scheduler import MAX_LOST_EVALUATIONS, EvaluationQueue
from evo.loop.seeding import Seeding
from evo.loop.startup import Prepared
from evo.loop.task_budget import TaskBudget
from islands.backend import Backend
from islands.migration import MigrationSettings, migration_round
from islands.stagnation import Stagnation
from operators.base import Context, Proposal
from operators.steering import LLMSteering

Events = Callable[..., None]


def _no_events(kind: str, **fields) -> None:
    pass


class _Out(NamedTuple):
    """A proposal under way, as the loop started it."""

    island: int
    task: str
    parent: Program | None  # None: a seed proposal
    inspirations: list[Program]
    model: str | None  # the LLM model picked for it (None: offline only)
    fragment: int | None  # the prompt fragment it was asked with (meta-prompt evolution)


class Controller:
    def __init__(self, *, settings: RunSettings, tasks: list[Task], archive: Archive, backend: Backend,
                 migration: MigrationSettings, events: Events = _no_events, resume_count: int = 0,
                 selection: Selection | None = None, inspiration: Inspiration | None = None,
                 steering: LLMSteering | None = None, seeding: Seeding | None = None,
                 arrivals: TaskArrivals | None = None, on_arrival: Callable[[Prepared], None] | None = None,
                 novelty: NoveltyFilter | None = None):
        """``arrivals``: tasks still being prepared when the search starts (evo.loop.arrivals); each piece
        goes to ``on_arrival`` (its seed stored, or why it is set aside) before its task joins.
        ``novelty``: near-duplicate children are not evaluated (evo.loop.novelty)."""
        self.settings = settings
        self.arrivals, self.on_arrival = arrivals, on_arrival
        self.tasks = {t.name: t for t in tasks}
        self.archive = archive
        self.backend = backend
        self.migration = migration
        self.selection = selection or Uniform()
        self.inspiration = inspiration or BestThenRandom()
        self.events = events
        self.steering = steering
        self.seeding = seeding if steering is not None else None  # seeds are LLM proposals
        self.novelty = novelty
        self.rng = np.random.default_rng([settings.seed, 1_000_003, resume_count])
        self.hardware = ""
        self.children_done = 0
        self.task_budget = TaskBudget(settings.budget_per_task)  # run.budget.per_task
        self.failed_in_a_row = 0
        self._task_cycle = {i: itertools.cycle(self.tasks) for i in range(backend.island_count)}
        self._island_shares = [0] * backend.island_count  # proposals started on each island in this session
        self.readiness = Readiness(archive, lambda: list(self.tasks), self.seeding, events)
        self._proposals: dict[Future, _Out] = {}
        self.feedback = Feedback(steering, self.rng, events, settings.failures_shown, settings.sweep_children)
        self.prompts = self.feedback.prompts
        self._llm_stopped = False
        self._pacing = Pacing(backend.slot_count)
        self._evaluations = EvaluationQueue(backend.slot_count, self._pacing)  # when and where
        self.loop_state = LoopState(self.rng, self.prompts, self.seeding)  # saved with each commit
        self.stagnation = Stagnation(0)  # islands without a new best, when reseeding is on (built in _start)
        self.late_baselines = LateBaselines(archive, backend.evaluator_count)

    # -- bookkeeping ---------------------------------------------------------
    def _children_under_way(self) -> list[str]:
        """The task of each child under way: queued or under evaluation, or proposed from a parent."""
        return [*(p.task for p in self._evaluations.programs() if p.operator not in SEED_OPERATORS),
                *(out.task for out in self._proposals.values() if out.parent is not None)]

    def _start(self) -> None:
        self.loop_state.restore(self.archive)  # continue where the last committed change left off
        self.children_done = self.archive.child_evaluation_count()
        self.task_budget.load(self.archive)
        self.late_baselines.resumed(self.tasks)  # rows of a session that ended before their baseline
        self.readiness.load(self.tasks)
        self.stagnation = Stagnation.of_run(self.archive, list(self.tasks), self.migration.reseed_after,
                                            self.backend.island_count)
        for task, island in self.stagnation.stagnant():  # a run stopped before it could reseed them
            if island < self.backend.island_count:
                self._reseed(task, island)
        for program in self.archive.pending():  # in flight when the last run stopped
            if program.task in self.tasks:
                self._evaluations.add(program)
        for task in self.tasks.values():
            self._add_seeds(task)
        self.events("start", children_done=self.children_done, requeued=self._evaluations.queued,
                    budget=self.settings.budget_evaluations)

    def _add_seeds(self, task: Task) -> None:
        for source in task.seeds:  # a seed file added since the last start counts too
            if not self.archive.find_duplicate(task.name, source):
                self._evaluations.add(self.archive.add_program(task=task.name, island=0, generation=0,
                                                               operator=SEED, source=source))
        self._check_unseeded(task.name, "evaluated by an earlier start of this run")

    def _admit_arrivals(self) -> None:
        """Tasks whose preparation ended since the last look join the search (evo.loop.arrivals)."""
        for piece in self.arrivals.take() if self.arrivals is not None else []:
            if self.on_arrival is not None:
                self.on_arrival(piece)
            for task in piece.tasks:
                self.tasks[task.name] = task
                self._task_cycle = {i: itertools.cycle(list(self.tasks)) for i in range(self.backend.island_count)}
                self.readiness.load([task.name])
                for program in self.archive.pending():  # a resumed run's, in flight when it stopped
                    if program.task == task.name:
                        self._evaluations.add(program)
                self._add_seeds(task)
                self.events("task_joined", task=task.name, tasks=len(self.tasks))

    # -- the loop -------------------------------------------------------------
    def run(self) -> None:
        # With LLM operators the loop mostly waits (futures, SQLite calls that release the GIL) while
        # island and evaluator threads of this process compute: a GIL switch interval of 0.5 ms, not 5,
        # gives it back sooner.  Offline proposals are all computation: there it only costs
        # (experiments/proposal_rate_bench.md).
        with switch_interval(0.0005 if self.steering is not None else None):
            self._run()

    def _run(self) -> None:
        self._start()
        stalled = False
        while True:
            self._admit_arrivals()
            self._evaluations.start(self._submit)
            if not stalled:
                self._start_proposals()
            arriving = self.arrivals.waiting() if self.arrivals is not None else None
            if not (self._proposals or self._evaluations or arriving):
                break
            done, _ = wait([*self._proposals, *self._evaluations.futures(), *([arriving] if arriving else [])],
                           return_when=FIRST_COMPLETED)
            for future in done:
                if future is arriving:
                    continue  # taken at the top of the loop
                if future in self._proposals:
                    self._pacing.finished(future, "proposal")
                    self._on_proposal(future, *self._proposals.pop(future))
                else:
                    self._on_evaluation(future, *self._evaluations.finished(future))
            if self.failed_in_a_row >= self.settings.max_failed_proposals and not stalled:
                stalled = True
                self.events("stalled", failed=self.failed_in_a_row)
        self.late_baselines.settle(self.backend, {n: t.source for n, t in self.tasks.items()})  # rows before their baseline
        self._record_stats()
        # What the last evaluations taught after their commits (fragment scores, the draws they
        # made) is saved with the rest, for a run resumed with a larger budget.
        for key, value in self.loop_state.meta().items():
            self.archive.set_meta(key, value)
        self.events("done", children_done=self.children_done, compiled_baseline_late=self.late_baselines.late,
                    compiled_baseline_filled=self.late_baselines.filled)

    def _submit(self, slot: int, program: Program) -> Future:
        task = self.tasks[program.task]
        bar = self._race_bar(program) if self.backend.races else None
        raced = {"race_bar": bar} if bar is not None else {}  # backends that do not race take no bar
        return self.backend.evaluate(slot, task.name, task.source, program.source, **raced)

    def _race_bar(self, program: Program) -> float | None:
        """The speedup a child races against: its first parent's (None for seeds and repairs of
        failed parents)."""
        return self.archive.get(program.parent_ids[0]).fitness if program.parent_ids else None

    def _start_proposals(self) -> None:
        islands, requests = self.backend.island_count, self.settings.proposals_per_island
        most = self.settings.proposals_held(self.steering is not None)
        # island -> its proposals out (one that came back holds no request: its island has room)
        held = Counter(out.island for future, out in self._proposals.items() if not future.done())
        backlog = self._pacing.backlog()
        for _ in range(most * islands):
            under_way = self._children_under_way()  # counted against the budget, and each task's cap
            left = self.settings.budget_evaluations - self.children_done - len(under_way)
            # Proposals prepared beyond an island's requests only while more than a wave of the budget
            # is left: at the end one would wait a whole reply for its island's slot while another
            # island's slot stood idle.
            cap = most if left > requests * islands else requests
            room = [i for i in range(islands) if held[i] < cap]
            seed_for = self.readiness.seed_task(self._evaluations.programs(), self._tasks_out())  # seeds are outside the evaluation budget
            ready = self.task_budget.open(self.readiness.ready, under_way, self.feedback)
            searchable = ready if self.arrivals is None else \
                self.arrivals.searchable(ready, len(self.tasks), left,
                                         any(p.operator == SEED for p in self._evaluations.programs()))
            if (not room or len(self._proposals) >= most * islands or self._evaluations.queued >= backlog
                    or (seed_for is None and (not searchable or left <= 0))):
                return
            model = None
            if self.steering is not None:
                model = self.steering.begin(self.rng)
                if model is None and (not self.steering.offline_operators or not searchable or left <= 0):
                    self._llm_budget_spent()
                    return  # wait for requests in flight; the run ends when nothing is left
            # The island with the fewest proposals out, then the fewest so far: a proposal given to an
            # island whose requests are all out waits there while another's slot may be idle.
            island = min(room, key=lambda i: (held[i], self._island_shares[i], i))
            repair = self.readiness.next_repair(self.feedback.repairs, room, left, self._tasks_out()) if model is not None else None
            sweep = self.feedback.next_sweep(room) if repair is None and seed_for is None and left > 0 else None
            attempt, inspirations = 0, []
            if repair is not None:
                parent, island, task_name = repair, repair.island, repair.task
            elif sweep is not None:
                (parent, attempt), island, task_name = sweep, sweep[0].island, sweep[0].task
            elif seed_for is not None and model is not None:
                parent, task_name = None, seed_for
                attempt = self.seeding.attempts[task_name] + self.readiness.attempts_out(self._tasks_out())[task_name]
            else:
                task_name = next(t for t in self._task_cycle[island] if t in searchable)
                if self.arrivals is not None:
                    self.arrivals.started(task_name)
                parent = self.archive.sample_parent(task_name, island, self.rng, self.selection)
                inspirations = self.archive.inspirations(task_name, parent.id, self.settings.inspirations,
                                                         self.rng, self.inspiration)
            task = self.tasks[task_name]
            fragment = self.prompts.choose(self.rng) if self.prompts is not None and model and not repair else None
            context = Context(task_name=task.name, task_source=task.source, parent=parent,
                              inspirations=inspirations, hardware=self.hardware,
                              sequence=self.loop_state.next_sequence(),
                              failures=self.feedback.failures(task_name, island if parent else None), model=model,
                              llm_allowed=self.steering is None or model is not None, repair=repair is not None,
                              sweep=sweep is not None, attempt=attempt,
                              guidance=fragment.text if fragment is not None else "")
            future = self.backend.propose(island, context)
            held[island] += 1
            self._island_shares[island] += 1
            self._proposals[future] = _Out(island, task_name, parent, inspirations, model,
                                           fragment.id if fragment is not None else None)
            self._pacing.started(future)

    def _tasks_out(self) -> list[str]:
        """The task of each proposal under way."""
        return [out.task for out in self._proposals.values()]

    def _llm_budget_spent(self) -> None:
        if self.steering.budget.exhausted and not self._llm_stopped:
            self._llm_stopped = True
            self.events("llm_budget_spent", **self.steering.budget.status())

    def _on_proposal(self, future: Future, island: int, task: str, parent: Program | None,
                     inspirations: list[Program], model: str | None, fragment: int | None) -> None:
        try:
            proposal: Proposal = future.result()
        except Exception as exc:  # the island actor died; it is restarted by the backend
            proposal = Proposal("unknown", None, f"island {island} failed: {type(exc).__name__}: {exc}")
        if self.steering is not None:
            self.steering.finish(model, proposal.llm_calls)
            model = proposal.llm_calls[-1]["model"] if proposal.llm_calls else None
        failure = proposal.note if proposal.source is None else None
        attempt = self.seeding is not None and task not in self.readiness.ready  # at the task's first correct kernel
        if attempt:
            self.seeding.attempted(task)
        resembles = None
        if failure is None:
            source_hash = proposal.source_hash or normalized_hash(proposal.source)
            if (self._evaluations.under_way(task, source_hash)
                    or self.archive.find_duplicate(task, proposal.source, source_hash)):
                failure = "duplicate of an archived or in-flight program"
            elif self.novelty is not None and (resembles := self.novelty.check(task, proposal.operator,
                                                                              proposal.source)) is not None:
                failure = resembles.reason
        if failure is None:
            self.failed_in_a_row = 0
            program = self.archive.add_program(
                task=task, island=island, generation=parent.generation + 1 if parent else 0,
                operator=proposal.operator, source=proposal.source,
                parent_ids=(*((parent.id,) if parent else ()), *proposal.mates),
                inspiration_ids=[p.id for p in inspirations if p.id not in proposal.mates],
                source_hash=source_hash, descriptors=proposal.descriptors, meta=self.loop_state.meta(),
                llm_calls=proposal.llm_calls)  # one transaction: the program, its requests, the RNG state
            self._evaluations.add(program)
            self.feedback.made(program, model, parent, fragment, bool(proposal.llm_calls))
        else:
            self.failed_in_a_row += 1
            self.feedback.failed(task, island, proposal.operator, failure, model, fragment, bool(proposal.llm_calls))
            self.events("proposal_failed", task=task, island=island, operator=proposal.operator, reason=failure,
                        **(resembles.fields() if resembles is not None else {}))
            if resembles is not None:  # the rejection with the child's requests
                self.novelty.rejected(resembles, task, island, proposal.operator, proposal.llm_calls)
            else:
                self.archive.record_llm_calls(proposal.llm_calls, task=task, island=island,
                                              operator=proposal.operator, program_id=None)
            if attempt:
                for key, value in self.seeding.meta().items():
                    self.archive.set_meta(key, value)
                self._check_unseeded(task, f"no kernel: {failure}")

    def _on_evaluation(self, future: Future, slot: int, program: Program) -> None:
        try:
            result: EvalResult = future.result()
        except Exception as exc:  # the evaluator actor (or its node) died, not the candidate's sandbox
            if self._evaluations.lost(program) is not None:  # evaluated again, on a restarted or another evaluator
                self.events("evaluation_lost", program_id=program.id, task=program.task, slot=slot,
                            reason=f"{type(exc).__name__}: {exc}"[:300])
                return
            result = EvalResult(status=Status.CRASHED, reason=f"evaluator failed {MAX_LOST_EVALUATIONS + 1} "
                                                              f"times, last: {type(exc).__name__}: {exc}")
        self._evaluations.recorded(program)
        insert = self.archive.record_evaluation(program, result, meta=self.loop_state.meta())
        self.late_baselines.recorded(program, slot, result)
        if result.device and not self.hardware:
            self.hardware = result.device
        if insert is not Insert.NOT_ADDED:
            self.readiness.became_ready(program.task)
            self.feedback.elite(program, result.speedup)
        if program.operator != SEED:  # made by an operator: its model, prompt and repair learn from it
            self.feedback.evaluated(program, result, insert)
        speedup = result.speedup if result.correct else None
        if program.operator in SEED_OPERATORS:  # every island starts from the seeds
            self.archive.migrate(program.task, [(program.island, i) for i in range(self.backend.island_count)
                                                if i != program.island], 1 << 30)
            self.stagnation.seeded(program.task, speedup)
        else:
            if self.stagnation.evaluated(program.task, program.island, speedup, result.speedup_noise):
                self._reseed(program.task, program.island)
            before, self.children_done = self.children_done, self.children_done + 1
            if self.task_budget.recorded(program.task):
                self.events("task_budget_spent", task=program.task, children=self.task_budget.cap)
            if self.migration.due(before, self.children_done):
                self._migrate()
            if self.children_done % self.settings.stats_interval == 0:
                self._record_stats()
        self.events("evaluated", program=program, result=result, insert=insert.value,
                    children_done=self.children_done, in_flight=self._in_flight())
        self._check_unseeded(program.task, f"{result.status.value}: {result.reason}")

    def _check_unseeded(self, task: str, last: str) -> None:
        under_way = (any(p.task == task for p in self._evaluations.programs())
                     or any(out.task == task for out in self._proposals.values()))
        self.readiness.check(task, last, under_way, self.tasks[task].files_hash)

    def _in_flight(self) -> dict:
        """What is under way: for the progress display and events.jsonl."""
        llm = [sum(1 for out in self._proposals.values() if out.island == i and out.model is not None)
               for i in range(self.backend.island_count)]
        # Each island sends at most proposals_per_island requests at once; the rest are prepared.
        state = {"proposals": len(self._proposals),
                 "llm_requests": sum(min(n, self.settings.proposals_per_island) for n in llm),
                 "evaluations": self._evaluations.running, "queued": self._evaluations.queued}
        if self.steering is not None:
            state["llm_usd"] = round(self.steering.budget.spent_usd, 4)
        return state

    def _record_stats(self) -> None:
        self.archive.record_stats(list(self.tasks), self.backend.island_count, self.children_done)

    def _migrate(self) -> None:
        self.events("migrated", **migration_round(self.archive, self.migration, self.backend.island_count,
                                                  self.settings.seed, self.children_done, sorted(self.readiness.ready)))

    def _reseed(self, task: str, island: int) -> None:
        done = self.stagnation.reseed(self.archive, task, island, self.backend.island_count)
        if done is not None:
            self.events("reseeded", task=task, island=island, **done)
