"""compare on synthetic envelopes with a known difference, through the real CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import task
from worktrial.analysis import stats
from worktrial.analysis.metrics import TaskInfo, build_report
from worktrial.model.envelope import Envelope, RunInfo, WorkspaceInfo
from worktrial.model.records import AttemptRecord, Tokens

ATTEMPTS = 4


def make_envelope(
    passes: dict[str, int],
    *,
    categories: dict[str, str] | None = None,
    cost: float | None = 0.01,
    tokens: int = 100,
    sha: str = "a" * 64,
    run_id: str = "run-a",
    agent: str = "agent-a",
) -> Envelope:
    """An envelope whose task ``t`` passed ``passes[t]`` of ATTEMPTS attempts (pass first, then fail)."""
    categories = categories or {}
    tasks = [TaskInfo(t, t, categories.get(t, "capability")) for t in passes]  # type: ignore[arg-type]
    records = [
        AttemptRecord(
            task_id=t,
            attempt=j + 1,
            outcome="pass" if j < c else "fail",
            claimed=True,
            verified=j < c,
            duration_secs=1.0,
            agent_secs=1.0,
            verify_secs=0.1,
            cost_usd=cost,
            tokens=Tokens(input=tokens, output=tokens // 2),
            turns=3,
        )
        for t, c in passes.items()
        for j in range(ATTEMPTS)
    ]
    return Envelope(
        harness_version="0.1.0",
        provider=None,
        model=None,
        agent={"name": agent},
        suite_path="suite.json",
        suite_sha256=sha,
        run=RunInfo(
            id=run_id,
            started_at="2026-01-01T00:00:00Z",
            finished_at="2026-01-01T00:01:00Z",
            complete=True,
            workspace=WorkspaceInfo(path="/nowhere", base_commit="0" * 40, dirty=False),
            attempts=ATTEMPTS,
            k=ATTEMPTS,
            jobs=1,
        ),
        report=build_report("s", "S", tasks, records, ATTEMPTS),
    )


def write(path: Path, envelope: Envelope) -> Path:
    path.write_text(envelope.model_dump_json(indent=2))
    return path


A_PASSES = {f"t{i:02d}": c for i, c in enumerate([4, 4, 3, 2, 0, 0, 1, 4, 2, 3, 0, 1])}
# B solves two tasks A never does (t04, t05), loses one A solves (t06), improves t03 by 1 of 4.
B_PASSES = {**A_PASSES, "t04": 2, "t05": 4, "t06": 0, "t03": 3}


def test_compare_reports_the_known_difference(cli, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", make_envelope(A_PASSES))
    b = write(tmp_path / "b.json", make_envelope(B_PASSES, cost=0.03, tokens=300, run_id="run-b", agent="agent-b"))
    result = cli(["compare", str(a), str(b), "--format", "json"], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    pair = data["pairs"][0]
    diffs = [(B_PASSES[t] - A_PASSES[t]) / ATTEMPTS for t in A_PASSES]
    # hand-computed: +2/4 +4/4 -1/4 +1/4 over 12 tasks = 1.5 / 12
    assert sum(diffs) / len(diffs) == pytest.approx(0.125)
    at1 = pair["overall"]["pass_at_1"]
    assert at1["difference"] == pytest.approx(0.125)
    assert at1["stderr"] == pytest.approx(stats.standard_error(diffs))
    # exact sign flips of the non-zero differences 1, .5, .25, .25 (sum 1.5): |S| >= 1.5 in 6 of 16 patterns
    assert at1["p_value"] == pytest.approx(6 / 16)
    assert at1["test"] == "sign-flip permutation (exact)"
    from scipy import stats as scipy_stats

    se = stats.standard_error(diffs) or 0
    t11 = scipy_stats.t.ppf(0.975, 11)
    assert at1["ci95"] == pytest.approx([0.125 - t11 * se, 0.125 + t11 * se])
    mde = (t11 + scipy_stats.t.ppf(0.8, 11)) * se
    assert at1["minimum_detectable"] == pytest.approx(mde)
    # headline k = 4: pass@4 is "solved at all", so only the flips move it: +2 -1 over 12 tasks
    assert pair["k"] == 4
    assert pair["overall"]["pass_at_k"]["difference"] == pytest.approx(1 / 12)
    flips = {f["task_id"]: f["solved_by"] for f in pair["flips"]}
    assert flips == {"t04": "b", "t05": "b", "t06": "a"}
    assert pair["efficiency_difference"]["mean_cost_per_attempt"] == pytest.approx(0.02)
    assert pair["efficiency_difference"]["mean_tokens_per_attempt"] == pytest.approx(300)
    assert data["same_suite"] is True


def test_compare_markdown_and_categories(cli, tmp_path: Path) -> None:
    cats = {t: ("regression" if i % 2 else "capability") for i, t in enumerate(A_PASSES)}
    a = write(tmp_path / "a.json", make_envelope(A_PASSES, categories=cats))
    b = write(tmp_path / "b.json", make_envelope(B_PASSES, categories=cats, run_id="run-b"))
    result = cli(["compare", str(a), str(b)], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "| **overall** | pass@1 | 12 | " in out
    assert "| capability | pass@1 | 6 |" in out and "| regression | pass@1 | 6 |" in out
    assert "+0.125" in out
    assert "### Tasks that flip" in out and "| t05 | regression | B only | 0/4 | 4/4 |" in out
    assert "would be detected 80% of the time at α = 0.05" in out
    assert "This describes the design, not the observed result" in out
    assert "| sign-flip |" in out
    assert "| mean cost per attempt | $0.0100 | $0.0100 | +$0.0000 |" in out


def test_compare_three_runs_gives_every_pair(cli, tmp_path: Path) -> None:
    paths = [
        write(tmp_path / f"{name}.json", make_envelope(p, run_id=name))
        for name, p in (("a", A_PASSES), ("b", B_PASSES), ("c", dict.fromkeys(A_PASSES, 4)))
    ]
    result = cli(["compare", *map(str, paths), "--format", "json"], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    pairs = [(p["a"], p["b"]) for p in json.loads(result.stdout)["pairs"]]
    assert pairs == [(str(paths[0]), str(paths[1])), (str(paths[0]), str(paths[2])), (str(paths[1]), str(paths[2]))]


def test_different_suites_are_refused_unless_allowed(cli, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", make_envelope(A_PASSES))
    other = {t: c for t, c in B_PASSES.items() if t not in ("t00", "t01")} | {"extra": 4}
    b = write(tmp_path / "b.json", make_envelope(other, sha="b" * 64, run_id="run-b"))
    refused = cli(["compare", str(a), str(b)], cwd=tmp_path)
    assert refused.exit_code == 2
    assert "different suite files" in refused.stderr and "--allow-different-suites" in refused.stderr
    allowed = cli(["compare", str(a), str(b), "--allow-different-suites", "--format", "json"], cwd=tmp_path)
    assert allowed.exit_code == 0, allowed.output
    data = json.loads(allowed.stdout)
    pair = data["pairs"][0]
    assert data["same_suite"] is False
    assert pair["overall"]["tasks"] == 10
    assert any("only shared task ids" in n for n in pair["notes"])
    assert any("2 only in A, 1 only in B" in n for n in pair["notes"])
    shared = [t for t in A_PASSES if t not in ("t00", "t01")]
    expected = sum((B_PASSES[t] - A_PASSES[t]) / ATTEMPTS for t in shared) / len(shared)
    assert pair["overall"]["pass_at_1"]["difference"] == pytest.approx(expected)
    markdown = cli(["compare", str(a), str(b), "--allow-different-suites"], cwd=tmp_path)
    assert "different suite files; only shared task ids are compared" in markdown.stdout


def test_stored_run_ids_resolve_in_the_workspace(cli, repo: Path) -> None:
    for run_id, passes in (("20260101T000000Z-aaaaaa", A_PASSES), ("20260101T000100Z-bbbbbb", B_PASSES)):
        store = repo / ".worktrial" / "runs" / run_id
        store.mkdir(parents=True)
        write(store / "envelope.json", make_envelope(passes, run_id=run_id))
    sub = repo / "sub"
    sub.mkdir()
    result = cli(["compare", "20260101T000000Z-aaaaaa", "20260101T000100Z-bbbbbb", "--format", "json"], cwd=sub)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pairs"][0]["overall"]["pass_at_1"]["difference"] == pytest.approx(0.125)
    missing = cli(["compare", "20260101T000000Z-aaaaaa", "no-such-run"], cwd=repo)
    assert missing.exit_code == 2
    assert "no stored run with that id" in missing.stderr


def test_power_from_two_envelopes(cli, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", make_envelope(A_PASSES))
    b = write(tmp_path / "b.json", make_envelope(B_PASSES, run_id="run-b"))
    result = cli(["power", "--from", str(a), "--from", str(b), "--delta", "0.05", "--format", "json"], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["tasks"] == 12 and data["attempts"] == ATTEMPTS
    v = data["variance"]
    per_task = v["omega2"] + v["sigma2_a"] / ATTEMPTS + v["sigma2_b"] / ATTEMPTS
    assert data["minimum_detectable_difference"] == pytest.approx(stats.z_for(df=11) * math.sqrt(per_task / 12))
    assert data["tasks_needed"] == stats.required_tasks(per_task, 0.05)


def test_power_cli_reproduces_miller_example(cli, tmp_path: Path) -> None:
    args = ["power", "--delta", "0.03", "--omega2", str(1 / 9), "--sigma2", "0", "--tasks", "500"]
    result = cli(args, cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "to detect 0.03 with 1 attempt per task: 971 tasks" in result.stdout
    assert "not possible with any number of attempts" in result.stdout
    default = cli(["power", "--tasks", "100", "--attempts", "3"], cwd=tmp_path)
    assert default.exit_code == 0
    assert "assumed defaults" in default.stdout and "minimum detectable difference" in default.stdout


def test_power_from_one_envelope_and_refusal_of_mixed_suites(cli, tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", make_envelope(A_PASSES))
    result = cli(["power", "--from", str(a), "--format", "json"], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    v = json.loads(result.stdout)["variance"]
    counts = list(A_PASSES.values())
    within = stats.mean([c * (ATTEMPTS - c) / (ATTEMPTS * (ATTEMPTS - 1)) for c in counts])
    between = (stats.sample_variance([c / ATTEMPTS for c in counts]) or 0.0) - within / ATTEMPTS
    assert v["sigma2_a"] == pytest.approx(within) and v["omega2"] == pytest.approx(2 * between)
    assert "uncorrelated" in v["source"]
    other = write(tmp_path / "b.json", make_envelope(B_PASSES, sha="b" * 64))
    mixed = cli(["power", "--from", str(a), "--from", str(other)], cwd=tmp_path)
    assert mixed.exit_code == 2
    assert "different suite files" in mixed.stderr


def test_compare_two_real_runs(cli, repo: Path, write_suite, tmp_path: Path) -> None:
    suite = write_suite([task("a"), task("b"), task("c", verify_commands=["test -f README.md"])], attempts=2)
    outputs = []
    for agent in ("oracle", "nop"):
        out = tmp_path / f"{agent}.json"
        args = ["eval", "--suite", str(suite), "--agent", agent, "--trust", "--format", "json", "--output", str(out)]
        assert cli([*args, "-q"], cwd=repo).exit_code == 0
        outputs.append(str(out))
    by_agent = {
        json.loads((p / "envelope.json").read_text())["agent"]["name"]: p.name
        for p in (repo / ".worktrial" / "runs").iterdir()
    }
    stored = [by_agent["oracle"], by_agent["nop"]]
    for refs in (outputs, stored):  # envelope files, and the same runs by their stored ids
        result = cli(["compare", *refs, "--format", "json"], cwd=repo)
        assert result.exit_code == 0, result.output
        pair = json.loads(result.stdout)["pairs"][0]
        # nop fails a and b, and passes c (its verifier checks a file that is always there)
        assert pair["overall"]["pass_at_1"]["difference"] == pytest.approx(-2 / 3)
        assert {f["task_id"] for f in pair["flips"]} == {"a", "b"}
    # A stored run that crashed before writing its envelope is rebuilt from its attempt records.
    (repo / ".worktrial" / "runs" / by_agent["nop"] / "envelope.json").unlink()
    rebuilt = cli(["compare", *stored, "--format", "json"], cwd=repo)
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads(rebuilt.stdout)["pairs"][0]["overall"]["pass_at_1"]["difference"] == pytest.approx(-2 / 3)


def test_power_from_single_attempt_runs_needs_sigma2(cli, tmp_path: Path) -> None:
    env = make_envelope(A_PASSES)
    for t in env.report.tasks:  # keep only each task's first attempt
        t.attempts = t.attempts[:1]
        t.total_runs, t.passed_runs = 1, int(t.attempts[0].outcome == "pass")
    single = write(tmp_path / "single.json", env)
    refused = cli(["power", "--from", str(single)], cwd=tmp_path)
    assert refused.exit_code == 2 and "--sigma2" in refused.stderr
    result = cli(["power", "--from", str(single), "--sigma2", "0.2", "--format", "json"], cwd=tmp_path)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rates = [t.passed_runs for t in env.report.tasks]
    assert data["variance"]["sigma2_a"] == 0.2
    assert data["variance"]["omega2"] == pytest.approx(2 * max(0.0, (stats.sample_variance(rates) or 0) - 0.2))


def test_identical_differences_do_not_claim_perfect_power() -> None:
    """Every task differing by exactly 1 gives variance 0: the detectable difference is unknown, not 0."""
    from worktrial.analysis.compare import difference

    result = difference([1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0])
    assert result.difference == -1.0
    assert result.minimum_detectable is None
    varied = difference([1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0])
    assert varied.minimum_detectable is not None and varied.minimum_detectable > 0
