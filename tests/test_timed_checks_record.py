"""What each result's timed calls were held to, kept in the archive (schema 11), said by `evo status`
and carried into an exported library's manifest."""
import json

from evaluator.result import EvalResult, Status
from evo.cli import main
from evo.views.summary import timed_checks_line
from tests.support.candidates import candidate


def _result(status: Status, timed_checks: dict | None) -> EvalResult:
    extra = {"timed_checks": timed_checks} if timed_checks is not None else {}
    return EvalResult(status=status, speedup=1.0 if status is Status.CORRECT else None, runtime_ms=1.0,
                      ref_runtime_ms=1.0, extra=extra)


def test_the_archive_counts_what_the_correct_results_were_held_to(tmp_path):
    from archive import Archive
    from archive.queries import ArchiveReader

    url = f"sqlite:///{tmp_path / 'a.db'}"
    archive = Archive(url)
    big = "an input set of 9000 MB, more than timing.fresh_inputs_mb"
    results = [
        _result(Status.CORRECT, {"fresh_inputs": True, "audited_call_ms": 0.5, "fresh_host_ms": [0.1, 0.3]}),
        _result(Status.CORRECT, {"fresh_inputs": False, "fresh_inputs_off": big}),
        _result(Status.CORRECT, {"fresh_inputs": False, "fresh_inputs_off": big}),
        _result(Status.CORRECT, None),  # timed calls not checked
        _result(Status.INCORRECT, {"fresh_inputs": True}),  # not a result a speedup stands on
    ]
    for n, result in enumerate(results):
        program = archive.add_program(task="double", island=0, generation=1, operator="constants",
                                      source=candidate(f"_r = {n}"))
        archive.record_evaluation(program, result)
    archive.close()
    reader = ArchiveReader(url=url)
    counts = reader.timed_checks()
    reader.close()
    assert counts == {"correct": 4, "checked": 3, "fresh": 1, "off": {big: 2}, "audited": 1}
    assert timed_checks_line(counts) == (
        "timed checks: 3 of 4 correct results checked on their timed calls; inputs drawn afresh for every timed "
        f"call in 1, not in 2 (2: {big}); held to an audited call's device time in 1; 1 recorded before "
        "schema 11 or without timed checks")
    assert timed_checks_line({"correct": 0, "checked": 0, "fresh": 0, "off": {}, "audited": 0}) is None


def test_status_and_export_say_what_the_timed_calls_were_held_to(small_run, tmp_path, capsys):
    assert main(["status", f"run.dir={small_run}"]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("timed checks:"))
    checked, correct = (int(w) for w in line.split(":")[1].split()[:3:2])
    assert checked == correct > 0 and f"inputs drawn afresh for every timed call in {correct}" in line, line
    out = tmp_path / "lib"
    assert main(["export", f"run.dir={small_run}", f"out={out}"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["tasks"].values():
        verified = entry["kernels"][0]["timed_checks"]
        assert verified["fresh_inputs"] is True and verified["outputs_checked"] >= 1, verified
