"""Prompts of any size reach agents: in ``$WORKTRIAL_PROMPT_FILE`` always, inline only while they fit."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.conftest import task
from tests.fakes import install_fake, invocations, share_with_sandbox
from tests.fakes.streams import SCENARIOS
from tests.hostile_support import run_worktrial
from worktrial.agents.presets.base import LongPrompt, long_prompt_argv
from worktrial.agents.prompt import MAX_ARG_BYTES, MAX_INLINE_PROMPT_BYTES, PROMPT_FILE

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _shared(tmp_path: Path) -> None:
    """The agents compare against files the test wrote and log into its directory: share it with the sandbox
    (the user's repository below it stays hidden)."""
    share_with_sandbox(tmp_path)


def big_prompt(size: int) -> str:
    """A prompt of ``size`` UTF-8 bytes with multi-byte characters and newlines, ending in a recognisable line."""
    line = "Fix the parser so that ünïcödé input round-trips; keep every test green.\n"
    body = (line * (size // len(line.encode()) + 1)).encode()[: size - 32].decode("utf-8", "ignore")
    tail = "[scenario:normal] the end\n"
    return body + " " * (size - len(body.encode()) - len(tail.encode())) + tail


# The agent checks everything itself; verification then only asks whether it said so.
CHECKING_AGENT = f"""set -e
cmp "$WORKTRIAL_PROMPT_FILE" "$EXPECTED"
cat > stdin.txt
cmp stdin.txt "$EXPECTED"
if [ "$(wc -c < "$EXPECTED")" -le {MAX_INLINE_PROMPT_BYTES} ]; then
  printf '%s' "$WORKTRIAL_PROMPT" > env.txt; cmp env.txt "$EXPECTED"
else
  test -z "${{WORKTRIAL_PROMPT+set}}"
fi
case "$WORKTRIAL_PROMPT_FILE" in "$WORKTRIAL_SCRATCH"/*) ;; *) exit 3;; esac
rm -f stdin.txt env.txt
touch done.txt
"""


@pytest.mark.slow
@pytest.mark.parametrize("size", [200, MAX_INLINE_PROMPT_BYTES, MAX_INLINE_PROMPT_BYTES + 1, MIB])
def test_the_command_agent_gets_every_prompt_size(repo: Path, write_suite, tmp_path: Path, size: int) -> None:
    prompt = big_prompt(size)
    assert len(prompt.encode()) == size
    expected = tmp_path / "expected.txt"
    expected.write_bytes(prompt.encode())
    agent = tmp_path / "agent.sh"
    agent.write_text(CHECKING_AGENT)
    suite = write_suite([task("t", prompt=prompt)], attempts=2)
    result = run_worktrial(
        [
            "eval",
            "--suite",
            str(suite),
            "--agent-cmd",
            f"sh {agent}",
            "--format",
            "json",
            "-q",
            "--trust",
            "--pass-env",
            "EXPECTED",
        ],
        cwd=repo,
        env={"EXPECTED": str(expected)},
    )
    assert result.returncode == 0, result.stderr
    attempts = json.loads(result.stdout)["report"]["tasks"][0]["attempts"]
    assert [(a["outcome"], a["reason"]) for a in attempts] == [("pass", None)] * 2


def _fake_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir, log_dir, home = tmp_path / "bin", tmp_path / "log", tmp_path / "home"
    for path in (bin_dir, log_dir, home):
        path.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_LOG_DIR", str(log_dir))
    (bin_dir / ".fake-log-dir").write_text(str(log_dir))  # presets keep FAKE_LOG_DIR out of the CLI's environment
    log_dir.chmod(0o1777)  # as root, sandboxed programs run as another uid
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("IS_SANDBOX", "1")
    return log_dir


# How each preset's CLI gets a prompt too big to pass inline: "stdin" or the flag that names the prompt file.
LONG_PROMPT_WAY = {
    "claude-code": "stdin",
    "codex": "stdin",
    "gemini-cli": "stdin",
    "opencode": "stdin",
    "qwen-code": "stdin",
    "aider": "--message-file",
    "goose": "-i",
}


def _run_preset(
    cli: Callable[..., Result],
    repo: Path,
    write_suite: Callable[..., Path],
    preset: str,
    prompt: str,
    exit_code: int = 0,
) -> dict[str, Any]:
    suite = write_suite([task("big", prompt=prompt)])
    result = cli(["eval", "--suite", str(suite), "--agent", preset, "--trust", "--format", "json", "-q"], cwd=repo)
    assert result.exit_code == exit_code, result.output  # 1: every attempt ended in error
    attempt: dict[str, Any] = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    return attempt


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(LONG_PROMPT_WAY))
def test_presets_take_a_1mib_prompt_from_stdin_or_a_file(
    preset: str, cli: Callable[..., Result], repo: Path, write_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = _fake_env(tmp_path, monkeypatch)
    binary, scenarios = SCENARIOS[preset]
    install_fake(tmp_path / "bin", binary, scenarios)
    prompt = big_prompt(MIB)
    attempt = _run_preset(cli, repo, write_suite, preset, prompt)
    assert attempt["outcome"] == "pass", attempt
    (call,) = invocations(log_dir, binary)
    assert all(len(arg.encode()) < MAX_INLINE_PROMPT_BYTES for arg in call["argv"]), "no argument carries the prompt"
    way = LONG_PROMPT_WAY[preset]
    if way == "stdin":
        assert call["stdin"] == prompt
    else:
        path = call["argv"][call["argv"].index(way) + 1]
        assert Path(path).name == PROMPT_FILE and "[scenario:" not in " ".join(call["argv"])


@pytest.mark.parametrize("preset", ["codex", "gemini-cli", "aider"])
def test_presets_keep_a_small_prompt_inline(
    preset: str, cli: Callable[..., Result], repo: Path, write_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below the bound nothing changes: the prompt is the argument it always was, stdin stays empty."""
    log_dir = _fake_env(tmp_path, monkeypatch)
    binary, scenarios = SCENARIOS[preset]
    install_fake(tmp_path / "bin", binary, scenarios)
    prompt = big_prompt(MAX_INLINE_PROMPT_BYTES)
    assert _run_preset(cli, repo, write_suite, preset, prompt)["outcome"] == "pass"
    (call,) = invocations(log_dir, binary)
    assert call["argv"][-1] == prompt and call["stdin"] == ""


@pytest.mark.slow
def test_an_argument_only_preset_refuses_a_prompt_over_the_kernel_limit(
    cli: Callable[..., Result], repo: Path, write_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cursor-agent takes the prompt only as an argument: 100 KiB still works, 1 MiB is one clear error."""
    log_dir = _fake_env(tmp_path, monkeypatch)
    binary, scenarios = SCENARIOS["cursor"]
    install_fake(tmp_path / "bin", binary, scenarios)
    fits = big_prompt(100 * 1024)
    assert _run_preset(cli, repo, write_suite, "cursor", fits)["outcome"] == "pass"
    assert invocations(log_dir, binary)[0]["argv"][-1] == fits
    attempt = _run_preset(cli, repo, write_suite, "cursor", big_prompt(MIB), exit_code=1)
    assert attempt["outcome"] == "error" and attempt["error_category"] == "prompt_too_long"
    assert "only as a command-line argument" in attempt["reason"] and "1024 KiB" in attempt["reason"]
    assert len(invocations(log_dir, binary)) == 1, "the CLI was never started with an argument it cannot take"


@pytest.mark.slow
def test_custom_agents_get_the_prompt_file_placeholder(repo: Path, write_suite, tmp_path: Path) -> None:
    config_dir = Path(os.environ["WORKTRIAL_CONFIG_DIR"])
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.toml").write_text(
        '[agents.by-file]\ncommand = "cmp {prompt_file} \\"$EXPECTED\\" && touch done.txt"\n'
        '[agents.by-arg]\ncommand = "test -n {prompt} && touch done.txt"\n'
    )
    share_with_sandbox(tmp_path)  # the config was just rewritten
    prompt = big_prompt(MIB)
    expected = tmp_path / "expected.txt"
    expected.write_bytes(prompt.encode())
    suite = write_suite([task("t", prompt=prompt)])
    outcomes = {}
    for agent in ("by-file", "by-arg"):
        result = run_worktrial(
            [
                "eval",
                "--suite",
                str(suite),
                "--agent",
                agent,
                "--format",
                "json",
                "-q",
                "--trust",
                "--pass-env",
                "EXPECTED",
            ],
            cwd=repo,
            env={"EXPECTED": str(expected)},
        )
        assert result.returncode == (0 if agent == "by-file" else 1), result.stderr
        outcomes[agent] = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    assert outcomes["by-file"]["outcome"] == "pass"
    assert outcomes["by-arg"]["error_category"] == "prompt_too_long"
    assert "{prompt_file}" in outcomes["by-arg"]["reason"]


def test_long_prompt_argv_rewrites() -> None:
    slot = "\0worktrial-prompt\0"
    file = Path("/s/prompt.txt")
    stdin_after_flag = LongPrompt(via="stdin", flag="--prompt")
    assert long_prompt_argv(["--yolo", "--prompt", slot], stdin_after_flag, file) == ["--yolo"]
    assert long_prompt_argv(["exec", "--", slot], LongPrompt(via="stdin", placeholder="-"), file) == [
        "exec",
        "--",
        "-",
    ]
    assert long_prompt_argv(["run", "--", slot], LongPrompt(via="stdin"), file) == ["run"]
    assert long_prompt_argv(["--message", slot, "--yes"], LongPrompt(via="file", flag="--message-file"), file) == [
        "--message-file",
        "/s/prompt.txt",
        "--yes",
    ]
    assert long_prompt_argv(["run", "--", slot, "x"], LongPrompt(via="stdin"), file) is None
    assert long_prompt_argv(["--prompt=" + slot], stdin_after_flag, file) is None
    assert MAX_ARG_BYTES == 131071
