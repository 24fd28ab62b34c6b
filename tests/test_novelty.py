"""Novelty rejection: near-duplicate children are not evaluated; constants variants always are."""
import itertools
import json
import re
import threading
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from sqlalchemy import select

from archive import Archive
from archive.models import LLMCallRow, RejectionRow
from archive.statements import PROGRAMS
from evo.core.novelty import FingerprintIndex, NoveltySettings, fingerprint, similarity
from evo.core.program import SEED
from evo.loop.controller import Controller
from evo.loop.novelty import NoveltyFilter
from evo.loop.run_settings import RunSettings
from evo.views.progress import RunEvents
from islands import Island, LocalBackend, MigrationSettings
from operators import LLMClient, LLMDiff, LLMMutation, LLMSteering
from operators.embeddings import Embeddings
from tests.support.llm_server import ScriptedLLMServer, TrivialEvaluator, completion

SEEDS = Path(__file__).parents[1] / "evo" / "suite" / "seeds"
GELU, SOFTMAX = (SEEDS / "gelu.py").read_text(), (SEEDS / "softmax.py").read_text()

# The seed with its names changed, comments and docstring gone, and the layout changed.
RENAMED = (GELU.replace("offs", "offsets").replace("x_ptr", "inp").replace("gelu_kernel", "k")
           .replace('"""Seed kernel for gelu: exact erf GELU over the flattened tensor, 1-D grid of cdiv(n, '
                    'BLOCK_SIZE) programs."""', "")
           .replace("  # 16..4096", "").replace("mask = offs < n_elements", "mask = (offsets\n        < n_elements)"))
RENAMED = re.sub(r"^# .*\n", "", RENAMED, flags=re.MULTILINE)
UNUSED_LINE = GELU.replace("class ModelNew(nn.Module):", "VARIANT_1 = 1\n\n\nclass ModelNew(nn.Module):")
CONSTANTS = GELU.replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 256").replace("NUM_WARPS = 4", "NUM_WARPS = 8")
# A different computation: the tanh approximation of GELU instead of erf.
TANH = GELU.replace("y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))",
                    "inner = 0.7978845608 * (x + 0.044715 * x * x * x)\n"
                    "    t = 2.0 * tl.sigmoid(2.0 * inner) - 1.0\n"
                    "    y = 0.5 * x * (1.0 + t)")


def index_of(*sources: str) -> FingerprintIndex:
    index = FingerprintIndex()
    for pid, source in enumerate(sources, 1):
        index.add(pid, fingerprint(source))
    return index


def test_a_renamed_and_reformatted_copy_is_a_near_duplicate_of_similarity_one():
    assert RENAMED != GELU and "offsets" in RENAMED and "# Tunable" not in RENAMED
    found = index_of(SOFTMAX, GELU).resembled(fingerprint(RENAMED), 0.98)
    assert found is not None and found.program_id == 2 and found.similarity == 1.0
    assert "near-duplicate of program 2" in found.reason


def test_an_unused_line_is_a_near_duplicate_below_one():
    found = index_of(GELU).resembled(fingerprint(UNUSED_LINE), 0.98)
    assert found is not None and found.program_id == 1 and 0.98 <= found.similarity < 1.0


def test_a_child_that_differs_only_in_tunable_constants_is_never_a_duplicate():
    assert index_of(GELU).resembled(fingerprint(CONSTANTS), 0.5) is None
    # Even when it also near-duplicates another program: it is a constants variant of one.
    assert index_of(UNUSED_LINE, GELU).resembled(fingerprint(CONSTANTS), 0.9) is None
    # Renamed as well, its constants still differ: a variant.
    assert index_of(GELU).resembled(fingerprint(RENAMED.replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 512")), 0.5) is None


def test_a_genuinely_different_kernel_is_not_a_duplicate():
    child = fingerprint(TANH)
    assert similarity(child, fingerprint(GELU)) < 0.95
    assert index_of(GELU, SOFTMAX).resembled(child, 0.98) is None
    assert similarity(fingerprint(SOFTMAX), fingerprint(GELU)) < 0.7


def test_the_threshold_decides():
    ratio = similarity(fingerprint(UNUSED_LINE), fingerprint(GELU))
    assert index_of(GELU).resembled(fingerprint(UNUSED_LINE), ratio) is not None
    assert index_of(GELU).resembled(fingerprint(UNUSED_LINE), min(1.0, ratio + 1e-6)) is None
    assert index_of(GELU).resembled(fingerprint(TANH), 0.5) is not None


def test_names_swapped_in_the_same_structure_lower_the_similarity():
    swapped = GELU.replace("tl.store(out_ptr + offs, y, mask=mask)", "tl.store(out_ptr + offs, x, mask=mask)")
    ratio = similarity(fingerprint(swapped), fingerprint(GELU))
    assert 0.99 < ratio < 1.0
    assert index_of(GELU).resembled(fingerprint(swapped), 1.0) is None


def test_settings_check_the_threshold_and_judge_the_llm_operators_but_repair():
    settings = NoveltySettings()
    assert settings.applies_to("llm_diff") and not settings.applies_to("llm_repair")
    assert not settings.applies_to("constants") and not NoveltySettings(enabled=False).applies_to("llm_diff")
    with pytest.raises(ValueError, match="novelty.threshold"):
        NoveltySettings(threshold=0)
    assert fingerprint("def broken(:\n") is None


def test_a_new_filter_compares_with_every_program_the_archive_holds(tmp_path):
    """As after a resume: the fingerprints come from the archive, programs under evaluation included."""
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    seed = archive.add_program(task="gelu", island=0, generation=0, operator=SEED, source=GELU)
    novelty = NoveltyFilter(NoveltySettings(), archive)
    assert novelty.check("gelu", "llm_diff", UNUSED_LINE).program_id == seed.id
    assert novelty.check("gelu", "constants", UNUSED_LINE) is None  # offline children are not judged
    assert novelty.check("softmax", "llm_diff", UNUSED_LINE) is None  # another task's programs do not count
    assert novelty.check("gelu", "llm_diff", TANH) is None
    child = archive.add_program(task="gelu", island=0, generation=1, operator="llm_diff", source=TANH)
    again = TANH.replace("class ModelNew(nn.Module):", "UNUSED = 3\n\n\nclass ModelNew(nn.Module):")
    assert novelty.check("gelu", "llm_rewrite", again).program_id == child.id


class HalfNearDuplicates:
    """Scripted replies: odd ones add an unused constant to the prompt's kernel (a near-duplicate),
    even ones a table of 40 x n numbers (a new kernel, far from every other)."""

    def __init__(self):
        self.count = itertools.count(1)
        self.lock = threading.Lock()

    def __call__(self, request: dict):
        prompt = request["messages"][-1]["content"]
        match = re.search(r"## (?:Current|Failed) kernel.*?```python\n(.*?)```", prompt, re.DOTALL)
        if match is None:  # the start-up check
            return 200, completion("OK")
        with self.lock:
            n = next(self.count)
        line = f"VARIANT_{n} = {n}" if n % 2 else f"TABLE_{n} = ({', '.join(['1'] * 40 * n)})"
        anchor = "class ModelNew(nn.Module):"
        if "<<<<<<< SEARCH" in prompt:
            return 200, completion(f"<<<<<<< SEARCH\n{anchor}\n=======\n{line}\n\n\n{anchor}\n>>>>>>> REPLACE\n")
        return 200, completion(f"```python\n{match.group(1).replace(anchor, f'{line}{chr(10) * 3}{anchor}')}```")


def test_a_run_with_an_llm_rejects_near_duplicates_and_evo_status_counts_them(tmp_path, builtin_tasks, capsys):
    from evo.cli import main

    task = builtin_tasks["gelu"]
    with ScriptedLLMServer(HalfNearDuplicates()) as server:
        # Priced here, so that the plain HTTP transport never imports litellm (seconds).
        client = LLMClient(model="openai/scripted", api_base=server.api_base, timeout_s=10, retries=0,
                           prices={"openai/scripted": [1.0, 1.0]})
        islands = [Island(0, [LLMDiff(client=client), LLMMutation(client=client)], [1, 1], seed=3, requests=2)]
        backend = LocalBackend(islands, lambda i: TrivialEvaluator(), 1, 3)
        archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
        events = RunEvents(tmp_path, 4, show=False)
        controller = Controller(
            settings=RunSettings(dir=str(tmp_path), seed=3, budget_evaluations=4, proposals_per_island=2),
            tasks=[task], archive=archive, backend=backend, migration=MigrationSettings(interval=0),
            events=events, steering=LLMSteering(models=["openai/scripted"]),
            novelty=NoveltyFilter(NoveltySettings(), archive, events=events))
        try:
            controller.run()
        finally:
            backend.close()
            events.close()
    assert archive.child_evaluation_count() == 4
    with archive.engine.connect() as c:
        rejections = c.execute(select(RejectionRow.__table__)).mappings().all()
        calls = c.execute(select(LLMCallRow.__table__)).mappings().all()
    assert rejections, "every odd reply is a near-duplicate"
    with archive.engine.connect() as c:
        sources = dict(c.execute(select(PROGRAMS.c.id, PROGRAMS.c.source)).all())
    for row in rejections:
        assert row["task"] == "gelu" and row["operator"] in ("llm_diff", "llm_rewrite")
        assert row["resembles"] in sources and 0.98 <= row["similarity"] <= 1.0 and row["measure"] == "tokens"
    assert sum(c["program_id"] is None for c in calls) == len(rejections), "their requests are accounted"
    assert not any("VARIANT_" in s for s in sources.values()), "no near-duplicate was evaluated"
    lines = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    failed = [e for e in lines if e["event"] == "proposal_failed"]
    assert len(failed) == len(rejections)
    assert all(e["reason"].startswith(f"near-duplicate of program {e['resembles']} ") for e in failed)
    archive.close()

    # evo status reads the count from the archive, as it would after a resume.
    with initialize_config_module(config_module="conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"run.dir={tmp_path}", "task=quick"])
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (tmp_path / "run.json").write_text(json.dumps({"tasks": ["gelu"], "device": "fake"}))
    assert main(["status", f"run.dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    n = len(rejections)
    assert f"novelty rejection: {n} {'child' if n == 1 else 'children'} not evaluated (saved ~{n} evaluation" in out
    assert re.search(r"llm_\w+\W+\d+\W+\d+\W+\d+\W+[1-9]\d*\W", out), "the operator table counts them"


def test_operator_success_counts_rejections(tmp_path):
    from archive.queries import ArchiveReader
    from evaluator import EvalResult, Status

    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    seed = archive.add_program(task="gelu", island=0, generation=0, operator=SEED, source=GELU)
    child = archive.add_program(task="gelu", island=0, generation=1, operator="llm_diff", source=TANH)
    archive.record_evaluation(child, EvalResult(status=Status.CORRECT, speedup=1.2))
    for _ in range(3):
        archive.record_rejection(task="gelu", island=0, operator="llm_diff", resembles=seed.id, similarity=0.99,
                                 measure="tokens", llm_calls=[{"model": "m", "prompt": "p"}])
    archive.record_rejection(task="gelu", island=0, operator="llm_rewrite", resembles=seed.id, similarity=1.0,
                             measure="tokens")
    archive.close()
    reader = ArchiveReader(path=tmp_path / "archive.db")
    rates = {r["operator"]: r for r in reader.operator_rates()}
    assert rates["llm_diff"]["rejected"] == 3 and rates["llm_diff"]["rate"] == pytest.approx(1 / 4)
    assert rates["llm_rewrite"] == dict(operator="llm_rewrite", programs=0, evaluated=0, correct=0, rejected=1,
                                        rate=0.0)
    assert reader.rejections() == {"llm_diff": 3, "llm_rewrite": 1}
    reader.close()


class Embedder:
    """Embeddings on the scripted server: a vector per text, from its counts of a few words."""

    WORDS = ("erf", "sigmoid", "VARIANT", "TABLE", "max")

    def __call__(self, request: dict):
        texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
        data = [{"object": "embedding", "index": i, "embedding": [1.0 + text.count(w) for w in self.WORDS]}
                for i, text in enumerate(texts)]
        return 200, {"object": "list", "data": data, "model": request["model"],
                     "usage": {"prompt_tokens": 1, "total_tokens": 1}}


@pytest.mark.slow  # litellm's import takes seconds
def test_an_embedding_model_judges_through_litellm(tmp_path):
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    seed = archive.add_program(task="gelu", island=0, generation=0, operator=SEED, source=GELU)
    with ScriptedLLMServer(Embedder()) as server:
        client = LLMClient(model="openai/scripted", api_base=server.api_base, timeout_s=10, retries=0)
        embed = Embeddings(model="openai/embedder", client=client)
        novelty = NoveltyFilter(NoveltySettings(embedding_model="openai/embedder", threshold=0.99), archive,
                                embed=embed)
        found = novelty.check("gelu", "llm_diff", UNUSED_LINE)  # one more VARIANT: cosine about 0.97
        assert found is None
        tanh = novelty.check("gelu", "llm_diff", TANH.replace("sigmoid", "erf_like"))
        assert tanh is not None and tanh.measure == "embedding" and tanh.program_id == seed.id
        assert novelty.check("gelu", "llm_diff", CONSTANTS) is None  # a constants variant, by the tokens
        assert novelty.check("gelu", "llm_diff", RENAMED).similarity == 1.0  # a renamed copy, by the tokens
        requests = [r for r in server.requests if "input" in r]
    assert requests and requests[0]["model"] == "embedder" and len(requests[0]["input"]) == 2
    archive.close()


def test_the_settings_come_from_the_config(tmp_path):
    from evo.config import build
    from evo.core.errors import ConfigError

    def built(*overrides):
        with initialize_config_module(config_module="conf", version_base="1.3"):
            return build(compose(config_name="config", overrides=[f"run.dir={tmp_path}", *overrides]))

    c = built("llm.model=openai/x", "llm.api_base=http://127.0.0.1:1/v1", "novelty.threshold=0.9",
              "novelty.embedding_model=openai/embedder", "novelty.operators=[llm_diff]")
    assert c.novelty == NoveltySettings(threshold=0.9, embedding_model="openai/embedder", operators=("llm_diff",))
    assert c.embeddings.model == "openai/embedder" and c.embeddings.client is c.llm
    with pytest.raises(ConfigError, match="novelty.threshold must be in"):
        built("novelty.threshold=1.5")


def test_embeddings_judge_beyond_the_tokens_and_a_failed_request_falls_back_to_them(tmp_path):
    archive = Archive(f"sqlite:///{tmp_path / 'archive.db'}")
    seed = archive.add_program(task="gelu", island=0, generation=0, operator=SEED, source=GELU)
    asked, events = [], []

    def embed(texts):
        asked.append(len(texts))
        return [[1.0, float("tl.sigmoid" in t)] for t in texts]

    novelty = NoveltyFilter(NoveltySettings(embedding_model="e", threshold=0.95), archive, embed=embed,
                            events=lambda kind, **f: events.append(kind))
    assert novelty.check("gelu", "llm_diff", UNUSED_LINE).measure == "embedding"
    assert novelty.check("gelu", "llm_diff", TANH) is None  # far by its embedding
    assert asked == [2, 1], "the seed embedded once, with the first child"
    child = archive.add_program(task="gelu", island=0, generation=1, operator="llm_diff", source=TANH)
    assert novelty.check("gelu", "llm_diff", TANH.replace("t = ", "u = ").replace("+ t)", "+ u)")) is not None

    def down(texts):
        raise RuntimeError("endpoint down")

    novelty = NoveltyFilter(NoveltySettings(embedding_model="e"), archive, embed=down,
                            events=lambda kind, **f: events.append(kind))
    assert novelty.check("gelu", "llm_diff", UNUSED_LINE).measure == "tokens" and novelty.embed is None
    assert events == ["novelty_embedding_failed"] and child.id > seed.id
    archive.close()


def test_a_renamed_copy_is_one_even_where_it_is_a_constants_variant_of_another_program():
    assert index_of(CONSTANTS, GELU).resembled(fingerprint(RENAMED), 0.98).program_id == 2


@pytest.mark.slow
def test_evo_run_with_an_llm_and_evo_status_say_what_novelty_rejection_saved(tmp_path):
    """The whole path: novelty.* from the config, the filter the runner builds, evo status afterwards."""
    import subprocess
    import sys

    def evo(*args):
        return subprocess.run([sys.executable, "-m", "evo.cli", *args], capture_output=True, text=True, timeout=600)

    run_dir = tmp_path / "run"
    with ScriptedLLMServer(HalfNearDuplicates()) as server:
        out = evo("run", f"run.dir={run_dir}", "task=quick", "task.names=[gelu]", "run.backend=local",
                  "evaluator.device=cpu", "run.progress=false", "islands.count=1", "run.budget.evaluations=2",
                  "llm.model=openai/scripted", f"llm.api_base={server.api_base}", "llm.retries=0",
                  "operators.constants.weight=0", "operators.param_crossover.weight=0",
                  "operators.dot_precision.weight=0", "operators.load_hints.weight=0", "operators.split_k.weight=0", "operators.persistent_tiles.weight=0", "operators.persistent_reduction.weight=0", "operators.split_reduction.weight=0", "operators.fuse_epilogue.weight=0", "operators.sweep.operator.max_children=0",
                  "operators.llm_crossover.weight=0", "operators.llm_repair.operator.probability=0")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    status = evo("status", f"run.dir={run_dir}")
    assert status.returncode == 0, status.stderr
    with Archive(f"sqlite:///{run_dir / 'archive.db'}").engine.connect() as c:
        rejected = len(c.execute(select(RejectionRow.__table__)).all())
    assert rejected >= 1
    assert f"novelty rejection: {rejected} child{'ren' if rejected > 1 else ''} not evaluated" in status.stdout
