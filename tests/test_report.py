"""`evo report`: PNG plots and one self-contained HTML page, checked in headless Chromium."""
import re
import shutil
import subprocess

import pytest

from evo.cli import main

SECTIONS = ("summary", "best-speedup", "qd", "heatmaps", "shapes", "operators", "cost", "lineage")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH, HEIGHT = 1280, 2000


@pytest.fixture(scope="module")
def report(small_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    assert main(["report", f"run.dir={small_run}", f"out={out}"]) == 0
    return out


@pytest.fixture(scope="module")
def cvt_report(timed_run, tmp_path_factory):
    """The report of a CVT run whose kernels were timed on every shape set (tests/timed_run.py)."""
    out = tmp_path_factory.mktemp("cvt_report")
    assert main(["report", f"run.dir={timed_run[0]}", f"out={out}"]) == 0
    return out


def test_report_writes_plots_and_a_self_contained_page(report):
    pngs = {p.name for p in report.glob("*.png")}
    assert {"best_speedup.png", "qd.png", "heatmap_gelu.png", "heatmap_row_sum.png", "operators.png"} <= pngs
    assert "cost.png" not in pngs  # no LLM calls in this run
    html = (report / "report.html").read_text()
    for section in SECTIONS:
        assert f'<section id="{section}">' in html
    assert html.count('<img src="data:image/png;base64,') == len(pngs)
    assert not re.search(r"""(https?:|ftp:)?//[\w.-]+\.\w""", re.sub(r"base64,[A-Za-z0-9+/=]+", "", html))
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "No LLM calls in this run" in html
    assert "<h3>gelu</h3>" in html and "<h3>row_sum</h3>" in html and "class ModelNew" in html  # lineages
    assert "evaluator.time_shapes=all" in html  # no shape timings in this run


def test_report_of_a_cvt_run_with_shape_timings(cvt_report, timed_run):
    from evo.views.report import cvt_projection
    from evo.views.run_view import open_run
    from tests.timed_run import CVT_CELLS

    assert {"heatmap_gelu.png", "heatmap_row_sum.png"} <= {p.name for p in cvt_report.glob("*.png")}
    with open_run(timed_run[0]) as run:
        cells = cvt_projection(run, "row_sum")
        coverage = next(r for r in run.task_rows() if r["task"] == "row_sum")["coverage"]
    assert len(cells["x"]) == len(cells["y"]) == CVT_CELLS and cells["axes"] == ["block_size", "num_warps"]
    filled = sorted(float(s) for s in cells["speedup"] if s == s)
    assert filled[-1] == 1.6 and set(filled) <= {0.5, 1.1, 1.6}  # elites' speedups; NaN for empty cells
    assert coverage == len(filled) / CVT_CELLS
    html = (cvt_report / "report.html").read_text()
    shapes = html[html.index('<section id="shapes">'):html.index('<section id="operators">')]
    _, ids = timed_run
    row_sum = shapes[shapes.index("<h3>row_sum</h3>"):]
    for shape, program, speedup in (("rows=1,cols=1023", 0, "2.000x"), ("rows=7,cols=4097", 1, "1.500x"),
                                    ("rows=4096,cols=8192", 2, "1.600x")):
        row = row_sum[row_sum.index(f"<td>{shape}</td>"):].split("</tr>")[0]
        assert f"program {ids['row_sum'][program]}" in row and speedup in row


def test_lineage_steps_carry_the_diffs(small_run):
    from evo.views.report import lineage_steps
    from evo.views.run_view import open_run

    with open_run(small_run) as run:
        ids = [i for i, p in run.archive.programs(range(1, 50)).items() if p["operator"] == "constants"]
        run.archive.best_kernels = lambda task, k: [dict(id=ids[0])]
        steps = lineage_steps(run, "any")
    assert len(steps) >= 2 and steps[0]["operator"] == "seed" and "class ModelNew" in steps[0]["source"]
    changed = [line for line in steps[-1]["diff"] if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]
    assert changed and all(s["source"] is None for s in steps[1:])


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
@pytest.mark.parametrize("which", ["report", "cvt_report"])
def test_the_page_renders_in_headless_chromium(which, request, tmp_path):
    from PIL import Image

    report = request.getfixturevalue(which)
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                    f"--window-size={WIDTH},{HEIGHT}", (report / "report.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    colors = {color: count for count, color in image.getcolors(maxcolors=WIDTH * HEIGHT)}
    not_white = 1 - colors.get((255, 255, 255), 0) / (WIDTH * HEIGHT)
    assert 0.05 < not_white < 0.9  # text, tables and plots on a white page
    assert len(colors) > 200  # plots in colour, not a blank or an error page


def test_report_of_a_missing_run(tmp_path, capsys):
    assert main(["report", f"run.dir={tmp_path / 'nope'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "nope").exists()


def test_llm_calls_show_in_report_and_status(small_run, tmp_path, capsys):
    from archive import Archive

    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    archive = Archive(f"sqlite:///{run_dir / 'archive.db'}")
    calls = [dict(model="openai/m1", cost_usd=0.25, prompt_tokens=10), dict(model="openai/m1", error="timeout")]
    archive.record_llm_calls(calls, task="gelu", island=0, operator="llm_rewrite", program_id=2)
    archive.close()
    assert main(["report", f"run.dir={run_dir}", f"out={tmp_path / 'report'}"]) == 0
    assert {"cost.png", "models.png"} <= {p.name for p in (tmp_path / "report").iterdir()}
    html = (tmp_path / "report" / "report.html").read_text()
    assert "openai/m1" in html and "$0.2500" in html and "No LLM calls" not in html
    assert main(["status", f"run.dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    assert "openai/m1" in out and "LLM calls: 2, 1 failed ($0.2500)" in out
