"""A suite too small to separate runs says so, in one sentence, wherever runs are ranked or compared."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.test_compare import ATTEMPTS, make_envelope, write
from worktrial.analysis.leaderboard import Contender, build_leaderboard
from worktrial.model.envelope import Envelope
from worktrial.render.leaderboard_markdown import render_leaderboard_markdown

SIX = [f"t{i}" for i in range(6)]


def _runs(tasks: list[str]) -> dict[str, Envelope]:
    """oracle passes everything, nop nothing, two agents in between: the issue's six-task matrix."""
    half = {t: ATTEMPTS if i % 2 else 0 for i, t in enumerate(tasks)}
    shares = {
        "oracle": dict.fromkeys(tasks, ATTEMPTS),
        "nop": dict.fromkeys(tasks, 0),
        "half": half,
        "most": dict.fromkeys(tasks, ATTEMPTS - 1),
    }
    return {name: make_envelope(p, run_id=f"run-{name}", agent=name) for name, p in shares.items()}


def _board_text(runs: dict[str, Envelope]) -> tuple[str, list[int | None]]:
    board = build_leaderboard([Contender(name, None, "complete", e) for name, e in runs.items()])
    nop = next(r for r in board.rows if r.agent == "nop")
    return render_leaderboard_markdown(board), [nop.rank, nop.tied_with]


def test_six_tasks_say_no_difference_can_be_told_apart_in_the_leaderboard(cli, tmp_path: Path) -> None:
    text, (rank, tied_with) = _board_text(_runs(SIX))
    # nop (0/24) is not separated from the oracle (24/24): with 6 tasks and 3 rows against #1 nothing can be.
    assert rank == 4 and tied_with == 1
    assert (
        "- note: With 6 tasks, no difference can be told apart: even a run better on every task gets p = 0.0938 "
        "(after correcting for 3 comparisons), not below 0.05; not separated does not mean equal." in text
    )
    # A suite big enough to detect a 10-point difference gets no such sentence, in the leaderboard or compare.
    tasks = [f"t{i:03d}" for i in range(400)]
    runs = _runs(tasks)
    text, (_, tied_with) = _board_text(runs)
    assert tied_with is None and "told apart" not in text
    paths = [write(tmp_path / f"{n}.json", runs[n]) for n in ("oracle", "nop")]
    compared = cli(["compare", *map(str, paths)])
    assert compared.exit_code == 0 and "told apart" not in compared.stdout


def test_compare_and_view_name_the_detectable_difference_of_a_small_suite(cli, tmp_path: Path) -> None:
    runs = _runs(SIX)
    oracle, nop = (write(tmp_path / f"{n}.json", runs[n]) for n in ("oracle", "nop"))
    planned = cli(["power", "--tasks", "6", "--attempts", str(ATTEMPTS)])
    # What `worktrial power` plans for this design, and the sentence saying the same.
    found = re.search(r"minimum detectable difference (\d\.\d\d)", planned.stdout)
    if found:
        sentence = f"With 6 tasks, differences below {found.group(1)} in pass rate cannot be told apart"
    else:
        assert "no difference is detectable" in planned.stdout, planned.stdout
        sentence = "With 6 tasks, no difference can be told apart with 80% power"
    compared = cli(["compare", str(oracle), str(nop)])
    assert compared.exit_code == 0, compared.output
    assert f"- note: {sentence}" in compared.stdout
    as_json = json.loads(cli(["compare", str(oracle), str(nop), "--format", "json"]).stdout)
    assert any(n.startswith(sentence) for n in as_json["pairs"][0]["notes"])
    page = tmp_path / "page.html"
    paths = [str(write(tmp_path / f"{n}.json", e)) for n, e in runs.items()]
    assert cli(["view", *paths, "--output", str(page)], cwd=tmp_path).exit_code == 0
    html = page.read_text()
    assert sentence in html and "With 6 tasks, no difference can be told apart" in html
