"""compare on synthetic envelopes with a known difference, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import task
from tests.test_stats import kept_by_the_exact_test
from worktrial.analysis import planning, stats
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
    # the CI holds every difference the same exact test keeps (brute force over the 2^12 subsets' means), and
    # 0 with it, since p >= 0.05
    lo, hi = at1["ci95"]
    kept = kept_by_the_exact_test(diffs)
    assert lo <= min(0.0, kept[0]) + 1e-9 and hi >= kept[1] - 1e-9
    assert at1["role"] == "primary" and at1["p_value_holm"] is None
    se = stats.standard_error(diffs) or 0
    assert at1["minimum_detectable"] == pytest.approx(
        planning.minimum_detectable_difference(12 * se * se, 12, attempts=4)
    )
    secondary = [pair["overall"]["pass_at_k"], pair["overall"]["pass_power_k"]]
    assert all(d["role"] == "secondary" for d in secondary)
    assert [d["p_value_holm"] for d in secondary] == pytest.approx(stats.holm([d["p_value"] for d in secondary]))
    # headline k = 4: pass@4 is "solved at all", so only the flips move it: +2 -1 over 12 tasks
    assert pair["k"] == 4
    assert pair["overall"]["pass_at_k"]["difference"] == pytest.approx(1 / 12)
    flips = {f["task_id"]: f["solved_by"] for f in pair["flips"]}
    assert flips == {"t04": "b", "t05": "b", "t06": "a"}
    assert pair["efficiency_difference"]["mean_cost_per_attempt"] == pytest.approx(0.02)
    assert pair["efficiency_difference"]["mean_tokens_per_attempt"] == pytest.approx(300)
    assert data["same_suite"] is True
    assert not (tmp_path / ".worktrial").exists()  # envelope files are not stored runs: nothing is noted


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
    # one primary test per pair; every other row says it is secondary and carries its Holm-adjusted p
    assert "| p | Holm p | test |" in out and "**Primary test: overall pass@1**" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "pass" in line.split("|")[2]]
    assert sum("| primary |" in line for line in rows) == 1
    data = json.loads(cli(["compare", str(a), str(b), "--format", "json"], cwd=tmp_path).stdout)["pairs"][0]
    groups = [data["overall"], *data["categories"]]
    differences = [g[m] for g in groups for m in ("pass_at_1", "pass_at_k", "pass_power_k")]
    secondary = [d for d in differences if d["role"] == "secondary"]
    assert len(secondary) == 8 and [d["role"] for d in differences].count("primary") == 1
    assert [d["p_value_holm"] for d in secondary] == pytest.approx(stats.holm([d["p_value"] for d in secondary]))


def test_comparing_again_after_a_run_grew_warns_of_optional_stopping(cli, repo: Path) -> None:
    """compare notes each stored run's attempts the first time; a run compared again with more says so."""
    ids = ("20260101T000000Z-aaaaaa", "20260101T000100Z-bbbbbb")
    for run_id, passes in zip(ids, (A_PASSES, B_PASSES), strict=True):
        store = repo / ".worktrial" / "runs" / run_id
        store.mkdir(parents=True)
        (store / "run.json").write_text("{}")  # a stored run (its records are not read here)
        write(store / "envelope.json", make_envelope(passes, run_id=run_id))
    first = cli(["compare", *ids, "--format", "json"], cwd=repo)
    assert first.exit_code == 0, first.output
    assert "optional stopping" not in first.stderr
    looked = json.loads((repo / ".worktrial" / "looked.json").read_text())
    assert looked[ids[1]]["attempts"] == 12 * ATTEMPTS
    again = cli(["compare", *ids], cwd=repo)
    assert again.exit_code == 0 and "optional stopping" not in again.stderr
    # B grows after it was first compared (as a resume adds attempts; here two more tasks ran)
    grown = make_envelope({**B_PASSES, "t12": 4, "t13": 0}, run_id=ids[1])
    write(repo / ".worktrial" / "runs" / ids[1] / "envelope.json", grown)
    third = cli(["compare", *ids], cwd=repo)
    assert third.exit_code == 0, third.output
    warnings = [line for line in third.stderr.splitlines() if "optional stopping" in line]
    assert len(warnings) == 1 and f"run {ids[1]} had {12 * ATTEMPTS} attempts" in warnings[0]
    assert f"has {14 * ATTEMPTS} now" in warnings[0]
    assert set(json.loads((repo / ".worktrial" / "looked.json").read_text())) == set(ids)
    # the same check in one call, for resume
    from worktrial.state.looks import grown_since_compared

    assert grown_since_compared(repo, ids[1], 14 * ATTEMPTS) == warnings[0].removeprefix("worktrial: warning: ")
    assert grown_since_compared(repo, ids[0], 12 * ATTEMPTS) is None
    assert grown_since_compared(repo, "never-compared", 99) is None


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
    per_task = max(0.0, v["omega2"] + v["sigma2_a"] / ATTEMPTS + v["sigma2_b"] / ATTEMPTS)
    # at the runs' own attempt count that is the observed variance of the paired differences, unclipped
    diffs = [(B_PASSES[t] - A_PASSES[t]) / ATTEMPTS for t in A_PASSES]
    assert per_task == pytest.approx(stats.sample_variance(diffs))
    mdd = planning.minimum_detectable_difference(per_task, 12, attempts=ATTEMPTS)
    assert data["minimum_detectable_difference"] == pytest.approx(mdd)
    assert data["tasks_needed"] == planning.required_tasks(per_task, 0.05, attempts=ATTEMPTS)


def test_power_cli_reproduces_miller_example(cli, tmp_path: Path) -> None:
    args = ["power", "--delta", "0.03", "--omega2", str(1 / 9), "--sigma2", "0", "--tasks", "500"]
    result = cli(args, cwd=tmp_path)
    assert result.exit_code == 0, result.output
    # exact McNemar with one attempt per task; Miller's normal formula says 969 (see test_stats)
    assert "to detect 0.03 with 1 attempt per task: 1042 tasks" in result.stdout
    assert "not possible with any number of attempts" in result.stdout
    default = cli(["power", "--tasks", "100", "--attempts", "3"], cwd=tmp_path)
    assert default.exit_code == 0
    assert "assumed defaults" in default.stdout and "minimum detectable difference" in default.stdout
    few = cli(["power", "--tasks", "5", "--attempts", "3"], cwd=tmp_path)
    assert few.exit_code == 0
    assert "no difference is detectable (the exact test needs at least 6 tasks)" in few.stdout


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

    result = difference([1.0] * 8, [0.0] * 8)
    assert result.difference == -1.0
    assert result.minimum_detectable is None
    varied = difference([1.0, 0.0, 1.0, 1.0] * 5, [0.0, 0.0, 1.0, 0.0] * 5)
    assert varied.minimum_detectable is not None and varied.minimum_detectable > 0
    # 4 tasks: no sign pattern reaches p < 0.05, so no true difference is detectable, however large
    assert difference([1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]).minimum_detectable is None
