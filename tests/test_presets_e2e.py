"""Every preset end to end through ``worktrial eval`` with its fake CLI on PATH.

One suite per preset exercises four scenarios (one per task): a normal run that does the work, a run
the agent reports as failed, a normal run with garbage mixed into its output, and a crash before any
output. The envelope's figures, the outcome, the trace notes, the command line and where the agent's
config/session state went are all checked.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.conftest import task
from tests.fakes import install_fake, invocations, share_with_sandbox
from tests.fakes.streams import CONFIG_ENV, EXPECTED, SCENARIOS
from worktrial.agents.pricing import price_table

PRESETS = sorted(SCENARIOS)

# How each preset reports a failed run and a crash: (outcome, error_category).
FAILED: dict[str, tuple[str, str | None]] = dict.fromkeys(PRESETS, ("fail", None))
CRASHED: dict[str, tuple[str, str | None]] = dict.fromkeys(PRESETS, ("error", "agent_failed"))
CRASHED["aider"] = ("fail", None)  # aider has no output to judge: a non-zero exit is a claimed failure
# The normal stream with noise mixed in still passes, except where the noise replaces the only report.
GARBAGE_PASSES = dict.fromkeys(PRESETS, True)
GARBAGE_PASSES["mini-swe-agent"] = False  # its trajectory file is the report; a corrupt one means no claim


@dataclass
class FakeEnv:
    bin_dir: Path
    log_dir: Path
    home: Path


@pytest.fixture
def fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeEnv:
    env = FakeEnv(bin_dir=tmp_path / "bin", log_dir=tmp_path / "log", home=tmp_path / "home")
    for path in (env.bin_dir, env.log_dir, env.home):
        path.mkdir()
    monkeypatch.setenv("PATH", f"{env.bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("FAKE_LOG_DIR", str(env.log_dir))
    (env.bin_dir / ".fake-log-dir").write_text(str(env.log_dir))  # what a command agent's allow-list keeps out
    # The fakes log how they were called from inside the sandbox: the user shares that one directory with it.
    share_with_sandbox(env.log_dir)
    monkeypatch.setenv("HOME", str(env.home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("IS_SANDBOX", "1")  # tests may run as root, where Claude Code requires it
    return env


def run_eval(cli: Callable[..., Result], repo: Path, suite: Path, agent: str, *extra: str) -> dict[str, Any]:
    result = cli(
        [
            "eval",
            "--suite",
            str(suite),
            "--agent",
            agent,
            "--trust",
            "--trust-project",
            "--format",
            "json",
            "-q",
            *extra,
        ],
        cwd=repo,
    )
    assert result.exit_code == 0, result.output
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


def attempts_by_task(envelope: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["task_id"]: t["attempts"][0] for t in envelope["report"]["tasks"]}


def trace(repo: Path, attempt: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((repo / attempt["trace"]).read_text())
    return data


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_end_to_end(preset: str, cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv) -> None:
    binary, scenarios = SCENARIOS[preset]
    install_fake(fake_env.bin_dir, binary, scenarios)
    names = ["normal", "failed", "garbage", "crash"]
    suite = write_suite([task(name, prompt=f"Create done.txt [scenario:{name}]") for name in names])

    envelope = run_eval(cli, repo, suite, preset, "--model", "acme/model-x")
    attempts = attempts_by_task(envelope)

    # The envelope's agent carries the preset and the version its binary reported.
    assert envelope["agent"]["name"] == preset
    assert envelope["agent"]["version"] == f"{binary} 9.9.9-fake"

    normal = attempts["normal"]
    assert normal["outcome"] == "pass", normal
    assert normal["claimed"] is True and normal["verified"] is True
    expected = EXPECTED[preset]
    assert normal["tokens"] == expected["tokens"]
    assert (
        normal["cost_usd"] == pytest.approx(expected["cost_usd"])
        if expected["cost_usd"]
        else normal["cost_usd"] is None
    )
    assert normal["turns"] == expected["turns"]
    normal_trace = trace(repo, normal)
    assert normal_trace["tool_counts"] == expected["tool_counts"]
    assert normal_trace["tool_calls"] == sum(expected["tool_counts"].values())

    outcome, category = FAILED[preset]
    assert attempts["failed"]["outcome"] == outcome
    assert attempts["failed"]["claimed"] is False
    assert attempts["failed"]["reason"]

    garbage = attempts["garbage"]
    if GARBAGE_PASSES[preset]:
        assert garbage["outcome"] == "pass", garbage
        assert garbage["tokens"] == expected["tokens"]
    else:
        assert garbage["outcome"] == "fail" and garbage["claimed"] is None
    assert trace(repo, garbage)["notes"], "garbage in the output must be noted in the trace"

    outcome, category = CRASHED[preset]
    crash = attempts["crash"]
    assert crash["outcome"] == outcome, crash
    assert crash["error_category"] == category
    assert trace(repo, crash)["notes"]

    runs = invocations(fake_env.log_dir, binary)
    assert len(runs) == len(names)
    for run in runs:
        # The agent ran inside its attempt's worktree, with its config dir in the attempt's scratch dir.
        assert Path(run["cwd"]).name.startswith(("work", "w-"))  # pooled worktrees move to fresh names
        attempt_root = Path(run["cwd"]).resolve().parent
        config_dir = Path(run["env"][CONFIG_ENV[preset]]).resolve()
        assert config_dir.is_relative_to(attempt_root / "scratch"), (config_dir, attempt_root)
        assert not config_dir.is_relative_to(fake_env.home.resolve())
        assert "model-x" in " ".join(run["argv"])
    # No attempt saw session state left by an earlier one, and nothing was written to the user's home.
    assert [run["inherited_state"] for run in runs] == [[] for _ in runs]
    assert list(fake_env.home.iterdir()) == []


@pytest.mark.slow
def test_preset_commands_match_documented_flags(
    cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    """The exact headless flags each preset passes (prompt position included)."""
    expected_argv = {
        "claude-code": ["-p", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions"],
        "codex": ["exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "--"],
        "gemini-cli": ["--yolo", "--output-format", "stream-json", "--prompt"],
        "opencode": ["run", "--format", "json", "--dangerously-skip-permissions", "--"],
        "goose": ["run", "--output-format", "stream-json", "-t"],
        "cursor": ["-p", "--force", "--trust", "--output-format", "stream-json"],
        "vtcode": ["exec", "--json"],
    }
    prompt = "Create done.txt [scenario:normal]"
    suite = write_suite([task("t", prompt=prompt)])
    for preset, flags in expected_argv.items():
        binary, scenarios = SCENARIOS[preset]
        install_fake(fake_env.bin_dir, binary, scenarios)
        run_eval(cli, repo, suite, preset)
        (run,) = invocations(fake_env.log_dir, binary)
        argv = run["argv"]
        if preset == "claude-code":
            assert argv == flags and run["stdin"] == prompt  # prompt on stdin
        else:
            assert argv[: len(flags)] == flags and argv[-1] == prompt, argv
            assert run["stdin"] == ""


@pytest.mark.slow
def test_codex_is_priced_from_the_table_when_the_model_is_known(
    cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    """Codex reports tokens but no cost; with --model the price table prices them (cached input at its rate)."""
    binary, scenarios = SCENARIOS["codex"]
    install_fake(fake_env.bin_dir, binary, scenarios)
    suite = write_suite([task("normal", prompt="Create done.txt [scenario:normal]")])
    envelope = run_eval(cli, repo, suite, "codex", "--model", "gpt-5.1")
    attempt = attempts_by_task(envelope)["normal"]
    tokens = EXPECTED["codex"]["tokens"]
    fresh = tokens["input"] - tokens["cached_input"]
    # openai/gpt-5.1 in data/prices.json: 1.25 input, 0.125 cached input, 10.0 output (USD per million)
    expected = (fresh * 1.25 + tokens["cached_input"] * 0.125 + tokens["output"] * 10.0) / 1_000_000
    assert attempt["cost_usd"] == pytest.approx(expected)
    taken_on = price_table().taken_on
    assert envelope["agent"]["price"] == {"route": "openai/gpt-5.1", "source": "table", "taken_on": taken_on}
    assert envelope["report"]["unpriced_runs"] == 0

    (repo / "worktrial.toml").write_text('[pricing."openai/*"]\ninput = 0.0\noutput = 0.0\n')
    free = run_eval(cli, repo, suite, "codex", "--model", "gpt-5.1")
    assert attempts_by_task(free)["normal"]["cost_usd"] == 0.0
    assert free["agent"]["price"]["source"] == "config"
    unknown = run_eval(cli, repo, suite, "codex")  # the CLI's own default model: unknowable, so unpriced
    assert attempts_by_task(unknown)["normal"]["cost_usd"] is None
