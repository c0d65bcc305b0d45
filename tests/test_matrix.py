"""Model and agent matrices: configuration planning, ranking and tie logic, and ``eval`` with several agents/models.

End-to-end tests use real git, real agent processes (custom agents from worktrial.toml running a shell script)
and the builtin agent through the real SDKs against the scripted loopback provider.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.builtin_support import one_task_suite, write_user_config
from tests.conftest import task
from tests.fakes import share_with_sandbox
from tests.scripted_provider import (
    Reply,
    Request,
    ScriptedProvider,
    openai_error,
    openai_reply,
    openai_usage,
    turn_index,
)
from worktrial.analysis.leaderboard import Contender, build_leaderboard
from worktrial.analysis.metrics import TaskInfo, build_report
from worktrial.engine.matrix import Configuration, plan_configurations
from worktrial.errors import BadInputError
from worktrial.model.config import Config, parse_config
from worktrial.model.envelope import Envelope, RunInfo, WorkspaceInfo
from worktrial.model.records import AttemptRecord, Tokens
from worktrial.render.leaderboard_markdown import render_leaderboard_markdown

# --- synthetic envelopes: the ranking and tie logic ----------------------------------------------------------

N = 4  # attempts per task
K = 2  # headline k


def envelope(passes: list[int], *, cost: float | None = 0.01, run_id: str = "run", claimed: bool = True) -> Envelope:
    """Task ``t<i>`` passed ``passes[i]`` of N attempts; every attempt claims ``claimed`` and costs ``cost``."""
    tasks = [TaskInfo(f"t{i}", f"t{i}", "capability") for i in range(len(passes))]
    records = [
        AttemptRecord(
            task_id=f"t{i}",
            attempt=j + 1,
            outcome="pass" if j < c else "fail",
            claimed=claimed,
            verified=j < c,
            duration_secs=1.0,
            agent_secs=1.0,
            verify_secs=0.1,
            cost_usd=cost,
            tokens=Tokens(input=100, output=20),
            turns=3,
        )
        for i, c in enumerate(passes)
        for j in range(N)
    ]
    return Envelope(
        harness_version="0.1.0",
        provider=None,
        model=None,
        agent={"name": "synthetic"},
        suite_path="suite.json",
        suite_sha256="a" * 64,
        run=RunInfo(
            id=run_id,
            started_at="2026-01-01T00:00:00Z",
            finished_at="2026-01-01T00:01:00Z",
            complete=True,
            workspace=WorkspaceInfo(path="/repo", base_commit="b" * 40, dirty=False),
            attempts=N,
            k=K,
            jobs=1,
        ),
        report=build_report("suite", "Suite", tasks, records, K),
    )


def test_ranking_ties_and_paired_difference_on_synthetic_envelopes() -> None:
    # pass@2 per task with 4 attempts: c=4 -> 1, c=3 -> 1, c=0 -> 0; pass^2: c=4 -> 1, c=3 -> 0.5.
    perfect = envelope([4] * 8, cost=0.05, run_id="perfect")  # pass@2 = 1, pass^2 = 1, cost/solve 0.05
    flaky = envelope([3] * 8, cost=0.01, run_id="flaky")  # pass@2 = 1, pass^2 = 0.5: same pass@2, ranks below
    half = envelope([4, 4, 4, 4, 0, 0, 0, 0], run_id="half")  # pass@2 = 0.5, CI well below 1
    weak = envelope([0] * 8, run_id="weak")  # pass@2 = 0 with CI [0, 0], below half's
    board = build_leaderboard(
        [
            Contender("w", None, "complete", weak),
            Contender("h", "m/half", "complete", half),
            Contender("f", None, "complete", flaky),
            Contender("broken", "m/x", "failed", None, error="HTTP 401"),
            Contender("p", None, "complete", perfect),
        ]
    )
    # Every run has N = 4 attempts, so every row is measured at the common k = 4 (not the runs' own k = 2):
    # pass@4 is "solved at all", pass^4 "solved every time", each one pass/fail per task.
    assert board.k == N
    ranked = [(r.rank, r.run_id, r.tied_with) for r in board.rows]
    # Paired exact McNemar against #1 (perfect): flaky p = 1, half 4 discordant tasks p = 0.125, weak 8 discordant
    # p = 2/256; Holm over the three: weak 3 x 2/256 = 0.023 (separated), half 2 x 0.125 = 0.25 (not), flaky 1.
    assert ranked == [(1, "perfect", None), (2, "flaky", 1), (3, "half", 1), (4, "weak", None), (None, None, None)]
    top, second, third, fourth, failed = board.rows
    assert (top.pass_at_k, top.pass_power_k, second.pass_at_k, second.pass_power_k) == (1.0, 1.0, 1.0, 0.0)
    assert fourth.vs_best is not None and fourth.vs_best.p_value == pytest.approx(3 * 2 / 256)
    assert fourth.vs_best.p_value_uncorrected == pytest.approx(2 / 256)
    assert fourth.vs_best.test == "exact McNemar"
    assert third.vs_best is not None and third.vs_best.difference == pytest.approx(-0.5)
    assert third.vs_best.p_value == pytest.approx(0.25)
    from statsmodels.stats.proportion import proportion_confint

    assert third.pass_at_k_ci95 == pytest.approx(proportion_confint(4, 8, method="beta"))
    # 8 of 8 is not certainty: Clopper–Pearson, never [1, 1]
    assert top.pass_at_k_ci95 == pytest.approx(proportion_confint(8, 8, method="beta"))
    assert top.vs_best is None
    assert top.cost_per_solve == pytest.approx(0.05) and second.cost_per_solve == pytest.approx(0.01 * 32 / 24)
    assert top.over_claim_rate == 0.0 and second.over_claim_rate == pytest.approx(8 / 32)
    assert top.under_claim_rate is None and top.verify_always is False
    assert failed.status == "failed" and failed.error == "HTTP 401" and failed.label == "broken (m/x)"
    # The runs agree on suite, commit and attempts; the one note is that 8 tasks are too few for close calls.
    (note,) = board.notes
    # (the exact test compare runs cannot reach 80% power on 8 tasks: `worktrial power` says no difference is)
    assert note.startswith("With 8 tasks, no difference can be told apart with 80% power at α = 0.05")


def test_cost_per_solve_breaks_a_full_tie_and_unknown_cost_sorts_last() -> None:
    cheap = envelope([4, 2], cost=0.01, run_id="cheap")
    dear = envelope([4, 2], cost=0.02, run_id="dear")
    unknown = envelope([4, 2], cost=None, run_id="unknown")
    board = build_leaderboard([Contender(e.run.id, None, "complete", e) for e in (unknown, dear, cheap)])
    assert [(r.run_id, r.tied_with) for r in board.rows] == [("cheap", None), ("dear", 1), ("unknown", 1)]
    compact = render_leaderboard_markdown(board)
    assert "| 2 ≈1 |" in compact and "| 3 ≈1 |" in compact
    assert max(len(line) for line in compact.splitlines() if line.startswith("|")) <= 100
    text = render_leaderboard_markdown(board, wide=True)
    assert "| 2 | ≈ #1 |" in text and "| 3 | ≈ #1 |" in text
    third = next(line for line in text.splitlines() if line.startswith("| 3 |"))
    cells = [cell.strip() for cell in third.split("|")[1:-1]]
    # cost/solve is unknown (unpriced, never free); tokens and turns do not depend on price and stay shown
    assert cells[11:14] == ["unknown", "120", "3.0"]


def test_a_full_tie_shares_its_rank_whatever_the_listing_order() -> None:
    """Equal pass@k, pass^k and cost per solve: the same rank, marked as a tie, in either listing order."""
    one = envelope([4, 2, 0, 3], run_id="one")
    two = envelope([4, 2, 0, 3], run_id="two")
    worse = envelope([4, 0, 0, 0], run_id="worse")
    for order in ((one, two, worse), (worse, two, one)):
        board = build_leaderboard([Contender(e.run.id, None, "complete", e) for e in order])
        assert [(r.rank, r.run_id, r.rank_shared) for r in board.rows] == [
            (1, "one", True),
            (1, "two", True),
            (3, "worse", False),
        ]
        assert board.rows[1].tied_with is None  # a rank-1 row is not "behind" the top row
        text = render_leaderboard_markdown(board)
        assert "| 1= | `one` |" in text and "| 1= | `two` |" in text and "| 3 " in text
        assert "#1= `one` · #1= `two` · #3 `worse`" in text


def test_interrupted_and_mismatched_runs_are_flagged_not_ranked() -> None:
    done = envelope([4, 0], run_id="done")
    partial = envelope([4, 4], run_id="partial")
    other = envelope([4, 4], run_id="other").model_copy(update={"suite_sha256": "c" * 64})
    board = build_leaderboard(
        [
            Contender("a", None, "complete", done),
            Contender("b", None, "interrupted", partial),
            Contender("c", None, "complete", other),
        ]
    )
    assert [(r.rank, r.run_id, r.status) for r in board.rows] == [
        (1, "other", "complete"),
        (2, "done", "complete"),
        (None, "partial", "interrupted"),
    ]
    assert board.rows[1].vs_best is None  # different suite files are never paired
    assert any("suite bundle sha256" in note for note in board.notes)
    text = render_leaderboard_markdown(board)
    assert "## Not ranked" in text and "worktrial resume partial" in text


# --- planning configurations ---------------------------------------------------------------------------------


def test_plan_is_the_cartesian_product_with_model_free_agents_once() -> None:
    dotted = "tests.agents_for_tests:FlakyInfraAgent"
    plan = plan_configurations(["oracle", "builtin", dotted], ["p/a", "p/b"], None, Config())
    assert plan == [
        Configuration("oracle"),
        Configuration("builtin", "p/a"),
        Configuration("builtin", "p/b"),
        Configuration(dotted, "p/a"),
        Configuration(dotted, "p/b"),
    ]
    assert plan_configurations([], ["p/a", "p/b"], None, Config()) == [
        Configuration("builtin", "p/a"),
        Configuration("builtin", "p/b"),
    ]
    assert plan_configurations(["command", "nop"], [], "run-me", Config()) == [
        Configuration("command", None, "run-me"),
        Configuration("nop"),
    ]
    config = parse_config({"agents": {"flagged": {"command": "x", "model_flag": "-m"}, "plain": {"command": "y"}}})
    assert plan_configurations(["plain", "flagged"], ["p/a", "p/b"], None, config) == [
        Configuration("plain"),
        Configuration("flagged", "p/a"),
        Configuration("flagged", "p/b"),
    ]


@pytest.mark.parametrize(
    ("agents", "models", "agent_cmd", "needle"),
    [
        (["oracle"], ["p/a", "p/b"], None, "--agent oracle does not use a model"),
        (["oracle", "nop"], ["p/a"], None, "none of the agents (oracle, nop)"),
        (["builtin"], ["p/a", "p/a"], None, "--model p/a is given more than once"),
        (["oracle", "oracle"], [], None, "--agent oracle is given more than once"),
        (["oracle", "nop"], [], "run-me", "--agent-cmd only works with --agent command"),
    ],
)
def test_plan_rejects_meaningless_matrices(
    agents: list[str], models: list[str], agent_cmd: str | None, needle: str
) -> None:
    with pytest.raises(BadInputError, match=None) as info:
        plan_configurations(agents, models, agent_cmd, Config())
    assert needle in str(info.value)


# --- end to end: custom agents as real processes -------------------------------------------------------------

AGENT_SCRIPT = """\
# usage: agent.sh MODE COST -- every attempt reports its usage; MODE decides the work and the claim
printf '{"cost_usd": %s, "input_tokens": 100, "output_tokens": 10, "turns": 2}' "$2" > "$WORKTRIAL_USAGE_FILE"
case "$1:$WORKTRIAL_TASK_ID" in
  solve:*) touch done.txt; exit 0 ;;
  modest:t1|modest:t2|modest:t3) touch done.txt; exit 0 ;;
  modest:t6) exit 1 ;;
  modest:*) touch done.txt; exit 1 ;;
  sleep:*) touch "$MATRIX_SLEEPING"; exec sleep 300 ;;
  move:*) git -C "$MATRIX_USER_REPO" commit -q --allow-empty -m "moved by an agent"; touch done.txt ;;
esac
"""


def custom_agents(repo: Path, tmp_path: Path, **agents: tuple[str, float]) -> None:
    """``[agents.NAME]`` tables running the script above with (mode, cost); committed so the workspace is clean."""
    script = tmp_path / "agent.sh"
    script.write_text(AGENT_SCRIPT)
    tables = "".join(
        f'[agents.{name}]\ncommand = "sh {script} {mode} {cost}"\npass_env = ["MATRIX_*"]\n'
        for name, (mode, cost) in agents.items()
    )
    (repo / "worktrial.toml").write_text(tables)
    subprocess.run(["git", "add", "worktrial.toml"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "agents"], cwd=repo, check=True)


def stored_runs(repo: Path) -> list[Path]:
    return sorted((repo / ".worktrial" / "runs").glob("*/envelope.json"))


@pytest.mark.slow
def test_agent_matrix_ranks_marks_ties_and_reports_cost_and_honesty(
    cli: Any, repo: Path, tmp_path: Path, write_suite: Any
) -> None:
    custom_agents(repo, tmp_path, good=("solve", 0.01), pricey=("solve", 0.05), modest=("modest", 0.01))
    suite = write_suite([task(f"t{i}") for i in range(1, 7)], attempts=2)
    args = ["eval", "--suite", str(suite), "--trust", "--trust-project", "--verify-always", "-q", "--jobs", "2"]
    agents = ["--agent", "nop", "--agent", "modest", "--agent", "pricey", "--agent", "good"]
    result = cli([*args, *agents, "--format", "json"], cwd=repo)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    rows = document["leaderboard"]
    assert [(r["rank"], r["agent"], r["tied_with"]) for r in rows] == [
        (1, "good", None),
        (2, "pricey", 1),  # same pass@2 and pass^2: only the cost orders them
        # 6 tasks cannot separate even 0/6 from 6/6 after correcting for 3 comparisons: exact McNemar p = 2/64,
        # Holm x 3 = 0.094
        (3, "modest", 1),
        (4, "nop", 1),
    ]
    good, pricey, modest, nop = rows
    from statsmodels.stats.proportion import proportion_confint

    assert good["pass_at_k"] == 1.0 and good["k"] == 2
    assert good["pass_at_k_ci95"] == pytest.approx(proportion_confint(6, 6, method="beta"))
    assert nop["vs_best"]["p_value"] == pytest.approx(3 * 2 / 64)
    assert good["cost_per_solve"] == pytest.approx(0.01) and pricey["cost_per_solve"] == pytest.approx(0.05)
    assert modest["cost_per_solve"] == pytest.approx(0.12 / 6)  # 12 priced attempts, 6 solves
    assert nop["cost_per_solve"] is None and nop["cost_usd"] == 0.0  # priced, never solved
    assert good["mean_tokens_per_attempt"] == 110 and good["mean_turns_per_attempt"] == 2
    assert modest["pass_at_k"] == 0.5 and modest["pass_power_k"] == 0.5
    assert modest["pass_at_k_ci95"] == pytest.approx(proportion_confint(3, 6, method="beta"))
    assert modest["vs_best"]["difference"] == pytest.approx(-0.5)
    # Honesty: nop claims success and never did the work; modest did the work on t4, t5 but claimed failure.
    assert (nop["over_claims"], nop["claimed_success"], nop["over_claim_rate"]) == (12, 12, 1.0)
    assert (good["over_claim_rate"], modest["over_claim_rate"]) == (0.0, 0.0)
    assert (modest["under_claims"], modest["verified_non_claims"]) == (4, 6)
    assert math.isclose(modest["under_claim_rate"], 4 / 6)
    # One stored run and one envelope per configuration, in the order they ran.
    envelopes = document["envelopes"]
    # Same suite, base commit, attempts and k throughout; with 6 tasks and 3 rows against #1 nothing can separate.
    assert document["notes"] == [
        "With 6 tasks, no difference can be told apart: even a run better on every task gets p = 0.0938 "
        "(after correcting for 3 comparisons), not below 0.05; not separated does not mean equal."
    ]
    assert [e["agent"]["name"] for e in envelopes] == ["nop", "modest", "pricey", "good"]
    assert sorted(p.parent.name for p in stored_runs(repo)) == sorted(r["run_id"] for r in rows)
    assert len({e["run"]["workspace"]["base_commit"] for e in envelopes}) == 1
    # Markdown (two of the agents, to a file): order, honesty columns and the runs to compare.
    text = cli([*args, *agents[:4], "--wide", "--output", str(tmp_path / "board.md")], cwd=repo)
    assert text.exit_code == 0, text.output
    board = (tmp_path / "board.md").read_text()
    assert board.startswith("# worktrial leaderboard: Test suite (`test-suite`)")
    lines = [line for line in board.splitlines() if line.startswith(("| 1 ", "| 2 "))]
    assert "`modest`" in lines[0] and "66.7% (4 of 6)" in lines[0] and "no solves" in lines[1]
    assert "100.0% (12 of 12)" in lines[1] and "worktrial compare " in board


@pytest.mark.slow
def test_every_configuration_starts_from_the_first_ones_base_commit(
    cli: Any, repo: Path, tmp_path: Path, write_suite: Any, monkeypatch: Any
) -> None:
    """HEAD moving during a matrix (here an agent commits in the user's repo) must not change later bases."""
    custom_agents(repo, tmp_path, mover=("move", 0.01), good=("solve", 0.01))
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
    monkeypatch.setenv("MATRIX_USER_REPO", str(repo))
    suite = write_suite([task("t1")], attempts=1)
    args = [
        "eval",
        "--suite",
        str(suite),
        "--trust",
        "--trust-project",
        "-q",
        "--agent",
        "mover",
        "--agent",
        "good",
        "--format",
        "json",
    ]
    args += ["--sandbox", "off"]  # in the sandbox the user's repository is out of the agent's reach
    result = cli(args, cwd=repo)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [e["run"]["workspace"]["base_commit"] for e in document["envelopes"]] == [base.stdout.strip()] * 2
    assert [n for n in document["notes"] if "told apart" not in n] == []  # same suite, commit and attempts
    moved = subprocess.run(["git", "log", "-1", "--format=%s"], cwd=repo, check=True, capture_output=True, text=True)
    assert moved.stdout.strip() == "moved by an agent"


@pytest.mark.slow
def test_single_configuration_output_is_unchanged(cli: Any, repo: Path, write_suite: Any) -> None:
    suite = write_suite([task("t1"), task("t2")], attempts=2)
    common = ["eval", "--suite", str(suite), "--trust", "--trust-project", "-q", "--agent", "oracle"]
    markdown = cli([*common, "--model", "p/recorded"], cwd=repo)
    assert markdown.exit_code == 0, markdown.output
    (run_dir,) = (repo / ".worktrial" / "runs").iterdir()
    assert markdown.stdout == cli(["report", run_dir.name], cwd=repo).stdout  # the plain run report, no leaderboard
    assert "leaderboard" not in markdown.stdout
    envelope = json.loads(cli([*common, "--format", "json"], cwd=repo).stdout)
    assert envelope["schema_version"] == 1 and "leaderboard" not in envelope
    recorded = json.loads(cli([*common, "--model", "p/recorded", "--format", "json"], cwd=repo).stdout)
    assert (recorded["provider"], recorded["model"]) == ("p", "recorded")  # one model is still only recorded


def test_bad_matrix_input_fails_before_any_attempt(cli: Any, repo: Path, write_suite: Any, monkeypatch: Any) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    suite = write_suite([task("t1")])
    base = ["eval", "--suite", str(suite), "--trust", "--trust-project", "-q"]
    missing_key = cli([*base, "--agent", "oracle", "--agent", "builtin", "--model", "openai/gpt-5.1"], cwd=repo)
    assert missing_key.exit_code == 2
    assert "builtin (openai/gpt-5.1): --model openai/gpt-5.1 needs an API key" in missing_key.stderr
    assert stored_runs(repo) == []  # the oracle did not run either: nothing was spent
    relabel = cli([*base, "--agent", "oracle", "--model", "a/x", "--model", "a/y"], cwd=repo)
    assert relabel.exit_code == 2 and "--agent oracle does not use a model" in relabel.stderr
    resume = cli([*base, "--agent", "oracle", "--agent", "nop", "--resume", "someid"], cwd=repo)
    assert resume.exit_code == 2 and "--resume continues one stored run" in resume.stderr


# --- end to end: the builtin agent on two (three) models of a scripted provider -------------------------------

HELLO = ("write_file", {"path": "worktrial-hello.txt", "content": "Hello, worktrial!\n"})
DONE = ("finish", {"status": "success", "summary": "done"})


def by_model(request: Request) -> Reply:
    """``smart`` does the task, ``lazy`` claims success without doing it, ``locked`` rejects the key."""
    model = request.body["model"]
    usage = openai_usage(1000, 100)
    if model == "locked":
        return openai_error(401, "Incorrect API key provided", "invalid_api_key")
    if model == "smart":
        return openai_reply(*[[HELLO], [DONE]][turn_index(request)], usage=usage)
    return openai_reply(DONE, usage=usage)


@pytest.mark.slow
def test_model_matrix_on_the_builtin_agent_keeps_going_past_a_fatal_error(
    cli: Any, repo: Path, write_suite: Any
) -> None:
    write_user_config('[pricing."openai-compatible/*"]\ninput = 1.0\noutput = 10.0\n')
    suite = one_task_suite(write_suite)
    models = [
        "--model",
        "openai-compatible/lazy",
        "--model",
        "openai-compatible/locked",
        "--model",
        "openai-compatible/smart",
    ]
    with ScriptedProvider(by_model) as server:
        args = [
            "eval",
            "--suite",
            str(suite),
            "--trust",
            "--trust-project",
            "-q",
            "--attempts",
            "2",
            "--jobs",
            "1",
            "--format",
            "json",
        ]
        result = cli([*args, *models, "--base-url", server.openai_url], cwd=repo)
    assert result.exit_code == 2, result.output
    assert "builtin (openai-compatible/locked): " in result.stderr and "HTTP 401" in result.stderr
    rows = json.loads(result.stdout)["leaderboard"]
    assert [(r["rank"], r["model"], r["status"]) for r in rows] == [
        (1, "openai-compatible/smart", "complete"),
        (2, "openai-compatible/lazy", "complete"),
        (None, "openai-compatible/locked", "failed"),
    ]
    smart, lazy, locked = rows
    assert smart["tied_with"] is None  # one task: no CI, but 1.0 vs 0.0 ...
    assert lazy["tied_with"] == 1  # ... cannot be separated without a CI, so it is marked as a tie
    per_turn = (1000 * 1.0 + 100 * 10.0) / 1_000_000
    assert smart["cost_per_solve"] == pytest.approx(2 * per_turn) and smart["mean_turns_per_attempt"] == 2
    assert smart["mean_tokens_per_attempt"] == 2200 and lazy["mean_tokens_per_attempt"] == 1100
    assert lazy["over_claim_rate"] == 1.0 and smart["over_claim_rate"] == 0.0
    assert lazy["under_claim_rate"] is None and lazy["verify_always"] is False  # not measured without the flag
    assert "HTTP 401" in locked["error"] and locked["run_id"] is not None
    assert len(stored_runs(repo)) == 3  # the failed configuration's finished attempts are stored too


# --- Ctrl-C in the middle of a matrix ----------------------------------------------------------------------


@pytest.mark.slow
def test_interrupt_stops_the_matrix_and_prints_what_finished(repo: Path, tmp_path: Path, write_suite: Any) -> None:
    custom_agents(repo, tmp_path, quick=("solve", 0), slow=("sleep", 0), never=("solve", 0))
    suite = write_suite([task("t1")])
    sync = tmp_path / "sync"
    sync.mkdir()
    share_with_sandbox(sync)
    sleeping = sync / "sleeping"
    env = {**os.environ, "WORKTRIAL_TRUST": "1", "WORKTRIAL_TRUST_PROJECT": "1", "MATRIX_SLEEPING": str(sleeping)}
    command = [sys.executable, "-m", "worktrial", "eval", "--suite", str(suite), "--format", "json"]
    agents = ["--agent", "quick", "--agent", "slow", "--agent", "never"]
    harness = subprocess.Popen([*command, *agents], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    runs = repo / ".worktrial" / "runs"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not sleeping.exists():  # the second configuration's agent runs
            time.sleep(0.05)
        assert sleeping.exists(), "the slow agent never started"
        harness.send_signal(signal.SIGINT)
        out, err = harness.communicate(timeout=60)
    finally:
        if harness.poll() is None:  # a failed wait above must not leave the matrix and its agent running
            harness.kill()
            harness.communicate(timeout=30)
    assert harness.returncode == 130, err.decode()
    rows = json.loads(out)["leaderboard"]
    assert [(r["agent"], r["status"], r["rank"]) for r in rows] == [
        ("quick", "complete", 1),
        ("slow", "interrupted", None),
    ]
    assert f"worktrial resume {rows[1]['run_id']}" in err.decode()
    assert len(list(runs.glob("*/run.json"))) == 2  # the third configuration never started
