"""Timeouts, preflight, ``worktrial agents``, preset overrides and custom agents from worktrial.toml."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import task
from tests.fakes import install_fake, invocations
from tests.fakes.events import CODEX_NORMAL
from tests.fakes.streams import SCENARIOS
from tests.test_presets_e2e import FakeEnv, attempts_by_task, fake_env, run_eval, trace
from worktrial.agents import AgentOptions, AgentSpec, create_agent
from worktrial.agents.presets import PRESETS, PresetAgent
from worktrial.agents.presets.parsing import ExitInfo
from worktrial.agents.pricing import cost_usd, resolve_price
from worktrial.errors import BadInputError
from worktrial.model.config import parse_config
from worktrial.model.records import Tokens

__all__ = ["fake_env"]  # the fixture is shared with the end-to-end tests


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["claude-code", "opencode"])
def test_stream_cut_off_by_the_timeout(
    preset: str, cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    binary, scenarios = SCENARIOS[preset]
    install_fake(fake_env.bin_dir, binary, scenarios)
    suite = write_suite([task("slow", prompt="work [scenario:partial]", timeout_secs=1)])
    attempt = attempts_by_task(run_eval(cli, repo, suite, preset))["slow"]
    assert attempt["outcome"] == "timeout" and attempt["claimed"] is None
    notes = trace(repo, attempt)["notes"]
    assert any("cut off mid-event" in note for note in notes), notes
    if preset == "opencode":  # the steps finished before the cut still count
        assert attempt["tokens"]["input"] == 1000 + 4000 + 300 and attempt["cost_usd"] == pytest.approx(0.0123)


def test_missing_binary_is_one_clear_error_naming_the_install(
    cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    suite = write_suite([task("t")])
    result = cli(["eval", "--suite", str(suite), "--agent", "codex", "--trust", "--trust-project"], cwd=repo)
    assert result.exit_code == 2
    assert "`codex` is not on PATH; install it with: npm install -g @openai/codex" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("preset", ["copilot", "continue", "kilo", "gptme", "droid"])
def test_a_base_url_without_a_model_is_one_clear_error(
    preset: str, cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    """These CLIs must be told which model a --base-url endpoint serves: refused before any attempt starts."""
    suite = write_suite([task("t")])
    argv = ["eval", "--suite", str(suite), "--agent", preset, "--base-url", "http://127.0.0.1:9/v1", "--trust"]
    result = cli(argv, cwd=repo)
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert f"agent {preset} needs --model with --base-url" in line


def test_claude_code_as_root_needs_a_declared_sandbox(monkeypatch: pytest.MonkeyPatch, fake_env: FakeEnv) -> None:
    install_fake(fake_env.bin_dir, "claude", SCENARIOS["claude-code"][1])
    monkeypatch.delenv("IS_SANDBOX")
    monkeypatch.setattr("worktrial.agents.presets.claude_code.is_root", lambda: True)
    agent = create_agent("claude-code", AgentOptions())
    with pytest.raises(BadInputError, match="IS_SANDBOX"):
        agent.preflight()
    configured = create_agent(
        "claude-code", AgentOptions(config=parse_config({"agents": {"claude-code": {"env": {"IS_SANDBOX": "1"}}}}))
    )
    configured.preflight()


def test_agents_command_lists_every_preset_with_install_state(
    cli: Callable[..., Result], repo: Path, fake_env: FakeEnv
) -> None:
    install_fake(fake_env.bin_dir, "codex", SCENARIOS["codex"][1])
    (repo / "worktrial.toml").write_text('[agents.mine]\ncommand = "codex exec {prompt}"\nparser = "codex"\n')
    result = cli(["agents", "--format", "json", "--trust-project"], cwd=repo)
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(PRESETS) <= set(rows)
    assert rows["codex"]["installed"] is True and rows["codex"]["version"] == "codex 9.9.9-fake"
    assert rows["aider"]["installed"] is False and rows["aider"]["install"]
    assert rows["oracle"]["kind"] == "bundled" and rows["oracle"]["installed"] is None
    assert rows["mine"]["kind"] == "custom" and rows["mine"]["installed"] is True
    table = cli(["agents"], cwd=repo).stdout
    assert "| codex | preset | yes | codex 9.9.9-fake |" in table
    assert "| gemini-cli | preset | no | — |" in table and "install: npm install -g @google/gemini-cli" in table


def test_preset_overrides_from_worktrial_toml(
    cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    install_fake(fake_env.bin_dir, "my-codex", SCENARIOS["codex"][1])
    (repo / "worktrial.toml").write_text(
        '[agents.codex]\nbinary = "my-codex"\nargs = ["--profile", "ci"]\nenv = { CODEX_EXTRA = "secret-value" }\n'
    )
    suite = write_suite([task("t", prompt="go [scenario:normal]")])
    envelope = run_eval(cli, repo, suite, "codex")
    assert attempts_by_task(envelope)["t"]["outcome"] == "pass"
    (run,) = invocations(fake_env.log_dir, "my-codex")
    assert run["argv"][-4:] == ["--profile", "ci", "--", "go [scenario:normal]"]
    assert envelope["agent"]["env_keys"] == ["CODEX_EXTRA"]
    assert "secret-value" not in json.dumps(envelope)


def test_custom_agent_with_prompt_placeholder_and_a_builtin_parser(
    cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    install_fake(fake_env.bin_dir, "thing", {"normal": {"stdout": CODEX_NORMAL, "record_env": ["THING_MODE"]}})
    (repo / "worktrial.toml").write_text(
        "[agents.thing]\n"
        'command = "thing run --json {prompt}"\n'
        'parser = "codex"\n'
        'model_flag = "--model"\n'
        'env = { THING_MODE = "ci" }\n'
    )
    prompt = "Fix it; don't `rm -rf` $HOME"
    suite = write_suite([task("t", prompt=prompt)])
    envelope = run_eval(cli, repo, suite, "thing", "--model", "acme/m 1")
    attempt = attempts_by_task(envelope)["t"]
    assert attempt["outcome"] == "pass"
    assert attempt["tokens"]["input"] == 24763 and attempt["turns"] is None  # no Codex session file: calls unknown
    (run,) = invocations(fake_env.log_dir, "thing")
    assert run["argv"] == ["--model", "acme/m 1", "run", "--json", prompt]  # quoted: one argument each
    assert run["env"] == {"THING_MODE": "ci"}
    assert envelope["agent"] == {
        "name": "thing",
        "custom": True,
        "command": "thing run --json {prompt}",
        "parser": "codex",
        "prompt": "argument",
        "model": "acme/m 1",
        "env_keys": ["THING_MODE"],
    }


def test_custom_agent_priced_by_its_price_model(
    cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    """A CLI that reports tokens but no cost is priced by ``price_model``; an unknown route is refused at once."""
    install_fake(fake_env.bin_dir, "thing", {"normal": {"stdout": CODEX_NORMAL}})
    (repo / "worktrial.toml").write_text(
        '[agents.thing]\ncommand = "thing run --json {prompt}"\nparser = "codex"\nprice_model = "openai/gpt-5.1"\n'
    )
    suite = write_suite([task("t")])
    envelope = run_eval(cli, repo, suite, "thing")
    attempt = attempts_by_task(envelope)["t"]
    price = resolve_price("openai/gpt-5.1")
    assert price is not None
    assert attempt["cost_usd"] == pytest.approx(cost_usd(Tokens(**attempt["tokens"]), price.price))
    assert attempt["cost_usd"] > 0 and envelope["report"]["unpriced_runs"] == 0
    assert envelope["agent"]["price"]["route"] == "openai/gpt-5.1"

    (repo / "worktrial.toml").write_text(
        '[agents.thing]\ncommand = "thing run --json {prompt}"\nparser = "codex"\nprice_model = "acme/nothing"\n'
    )
    result = cli(["eval", "--suite", str(suite), "--agent", "thing", "--trust", "--trust-project", "-q"], cwd=repo)
    assert result.exit_code == 2
    assert "price_model 'acme/nothing' has no price" in result.output


def test_custom_agent_on_stdin_with_usage_file(
    cli: Callable[..., Result], repo: Path, write_suite, fake_env: FakeEnv
) -> None:
    script = fake_env.bin_dir / "usage-agent"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "prompt = sys.stdin.read()\n"
        "open('done.txt', 'w').write(prompt)\n"
        "json.dump({'input_tokens': 11, 'output_tokens': 4, 'cost_usd': 0.5, 'turns': 2,"
        " 'tool_calls': {'edit': 3}}, open(os.environ['WORKTRIAL_USAGE_FILE'], 'w'))\n"
    )
    script.chmod(0o755)
    (repo / "worktrial.toml").write_text('[agents.stdin-agent]\ncommand = "usage-agent"\n')
    suite = write_suite([task("t", prompt="from stdin")])
    attempt = attempts_by_task(run_eval(cli, repo, suite, "stdin-agent"))["t"]
    assert attempt["outcome"] == "pass" and attempt["cost_usd"] == 0.5 and attempt["tool_calls"] == 3


def test_custom_agent_config_errors_are_clear(cli: Callable[..., Result], repo: Path, write_suite) -> None:
    (repo / "worktrial.toml").write_text('[agents.bad]\ncommand = "x {prompt}"\nparser = "nope"\n')
    result = cli(
        ["eval", "--suite", str(write_suite([task("t")])), "--agent", "bad", "--trust", "--trust-project"], cwd=repo
    )
    assert result.exit_code == 2
    assert "[agents.bad].parser must be one of: usage-file, claude-code" in result.output


def test_unknown_agent_lists_presets_and_custom_agents(cli: Callable[..., Result], repo: Path, write_suite) -> None:
    (repo / "worktrial.toml").write_text('[agents.mine]\ncommand = "true"\n')
    result = cli(
        ["eval", "--suite", str(write_suite([task("t")])), "--agent", "nope", "--trust", "--trust-project"], cwd=repo
    )
    assert result.exit_code == 2
    assert "claude-code" in result.output and "mine" in result.output and "vtcode" in result.output


def test_bundled_agents_win_name_clashes_with_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    import pluggy

    from worktrial.agents import registry
    from worktrial.agents.registry import hookimpl

    class Plugin:
        @hookimpl
        def register_agents(self, register: Callable[[AgentSpec], None]) -> None:
            register(AgentSpec("nop", "impostor", lambda options: None))  # type: ignore[arg-type,return-value]
            register(AgentSpec("plugin-agent", "from a plugin", lambda options: None))  # type: ignore[arg-type,return-value]

    original = pluggy.PluginManager.load_setuptools_entrypoints

    def load(self: pluggy.PluginManager, group: str, name: str | None = None) -> int:
        self.register(Plugin())
        return original(self, group, name)

    monkeypatch.setattr(pluggy.PluginManager, "load_setuptools_entrypoints", load)
    registry.agent_specs.cache_clear()
    try:
        specs = registry.agent_specs()
        assert specs["nop"].summary != "impostor"
        assert "plugin-agent" in specs
    finally:
        registry.agent_specs.cache_clear()


def test_describe_never_includes_env_values_and_shows_the_command() -> None:
    options = AgentOptions(
        model="gpt-5", config=parse_config({"agents": {"codex": {"env": {"OPENAI_API_KEY": "sk-secret"}}}})
    )
    described = PresetAgent(PRESETS["codex"], options).describe()
    assert "sk-secret" not in json.dumps(described)
    assert described["command"][:2] == ["codex", "exec"] and described["model"] == "gpt-5"
    assert shlex.join(described["command"]).endswith("--model gpt-5 -- PROMPT")


def test_file_parsers_read_from_scratch(tmp_path: Path) -> None:
    verdict = PRESETS["mini-swe-agent"].parser().finish(ExitInfo(returncode=1, timed_out=False, scratch=tmp_path))
    assert verdict.error_category == "agent_failed"
    assert any("was not written" in note for note in verdict.usage.notes)


def test_readme_plugin_example_registers_and_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli: Callable[..., Result], repo: Path, write_suite
) -> None:
    """The Python plugin example in docs/agents.md, loaded as if from the entry-point group, really works."""
    import importlib
    import re

    import pluggy

    from worktrial.agents import registry

    readme = (Path(__file__).resolve().parent.parent / "docs" / "agents.md").read_text()
    section = readme[readme.index("### Python plugins") :]
    code = re.search(r"```python\n# my_agents/plugin.py\n(.*?)```", section, re.S)
    assert code is not None
    package = tmp_path / "plugins" / "my_agents"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text(code.group(1))
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    plugin = importlib.import_module("my_agents.plugin")
    original = pluggy.PluginManager.load_setuptools_entrypoints

    def load(self: pluggy.PluginManager, group: str, name: str | None = None) -> int:
        self.register(plugin)
        return original(self, group, name)

    monkeypatch.setattr(pluggy.PluginManager, "load_setuptools_entrypoints", load)
    registry.agent_specs.cache_clear()
    try:
        suite = write_suite([task("t")])
        attempt = attempts_by_task(run_eval(cli, repo, suite, "echo"))["t"]
        assert attempt["outcome"] == "pass"
        listed = cli(["agents"], cwd=repo).stdout
        assert "| echo | plugin | — | — | writes the prompt to done.txt |" in listed
    finally:
        registry.agent_specs.cache_clear()


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_extra_args_go_before_the_prompt(preset: str, tmp_path: Path) -> None:
    from worktrial.agents.presets.base import Invocation

    spec = PRESETS[preset]
    argv = spec.argv(Invocation("THE PROMPT", "m", tmp_path, tmp_path, extra_args=("--extra", "1")))
    start = argv.index("--extra")
    assert argv[start + 1] == "1"
    if not spec.stdin_prompt:
        assert start < argv.index("THE PROMPT")
        assert argv[start - 1] not in ("-t", "--prompt", "--message", "-m", "--model", "-o")
