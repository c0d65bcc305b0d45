"""Typed configuration: config.toml overlaid by worktrial.toml, and errors that name the file, the table and the key."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.builtin_support import write_user_config
from tests.conftest import task
from worktrial.agents.base import AgentOptions
from worktrial.agents.custom import CustomAgent
from worktrial.agents.presets import PRESETS, PresetAgent
from worktrial.errors import BadInputError
from worktrial.model.config import AgentConfig, Config, parse_config
from worktrial.state.config import config_dir, load_config


def test_project_overlays_user_key_by_key(repo: Path) -> None:
    write_user_config(
        '[agents.mine]\ncommand = "mine {prompt}"\nenv = { A = "user", B = "user" }\n'
        '[providers.corp]\nbase_url = "https://llm.corp/v1"\napi_key_env = "CORP_KEY"\n'
        "[agents.builtin]\nmax_turns = 7\ntemperature = 0.2\n"
    )
    (repo / "worktrial.toml").write_text(
        '[agents.mine]\nenv = { B = "project" }\n[providers.corp]\napi = "anthropic"\n'
        '[agents.builtin]\nmax_turns = 3\n[pricing."corp/*"]\ninput = 0\noutput = 0\n'
    )
    config = load_config(repo)
    assert isinstance(config, Config)
    mine = config.custom_agents()["mine"]
    assert mine.command == "mine {prompt}" and mine.env == {"A": "user", "B": "project"}
    corp = config.providers["corp"]
    assert (corp.base_url, corp.api_key_env, corp.api) == ("https://llm.corp/v1", "CORP_KEY", "anthropic")
    assert config.builtin is not None and (config.builtin.max_turns, config.builtin.temperature) == (3, 0.2)
    assert config.pricing["corp/*"].input == 0.0
    assert load_config(None).builtin is not None and load_config(None).builtin.max_turns == 7  # type: ignore[union-attr]


def test_no_files_is_an_empty_config(repo: Path) -> None:
    assert load_config(repo) == Config()


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[agents.mine]\ntimeout = 3\n", "worktrial.toml: [agents.mine]: unknown key(s) timeout; known: command,"),
        ('[agents.mine]\ncommand = "  "\n', "worktrial.toml: [agents.mine].command: must be a non-empty string"),
        ("[agents.mine]\nenv = { A = 1 }\n", "worktrial.toml: [agents.mine].env.A: must be a valid string"),
        ('[agents.codex]\nargs = "--x"\n', "worktrial.toml: [agents.codex].args: must be a valid list"),
        ("[agents.builtin]\nmax_turns = 0\n", "worktrial.toml: [agents.builtin].max_turns: must be greater than"),
        ('[agents.builtin]\nmax_turns = "5"\n', "worktrial.toml: [agents.builtin].max_turns: must be a valid integer"),
        ('[providers.x]\napi_key = "sk"\n', "[providers.x]: unknown key(s) api_key; known: base_url, api_key_env"),
        ('[pricing."a/b"]\ninput = 1\n', 'worktrial.toml: [pricing."a/b"].output: is required'),
        ("[agent.mine]\n", "worktrial.toml: unknown table(s) agent; known: agents, providers, pricing"),
        ("agents = 3\n", "worktrial.toml: agents: must be a valid dictionary"),
    ],
)
def test_errors_name_file_table_and_key(repo: Path, toml: str, message: str) -> None:
    (repo / "worktrial.toml").write_text(toml)
    with pytest.raises(BadInputError, match=re.escape(message)) as caught:
        load_config(repo)
    assert "\n" not in str(caught.value)


def test_user_file_errors_name_the_user_file(repo: Path) -> None:
    write_user_config("[providers.ollama]\napi = 'grpc'\n")
    with pytest.raises(BadInputError) as caught:
        load_config(repo)
    where = str(config_dir() / "config.toml")
    assert str(caught.value) == f"{where}: [providers.ollama].api: must be one of openai, anthropic (got 'grpc')"


def test_invalid_toml_is_one_line(repo: Path) -> None:
    (repo / "worktrial.toml").write_text("[agents\n")
    with pytest.raises(BadInputError, match=r"worktrial.toml: invalid TOML"):
        load_config(repo)


def test_keys_of_the_other_agent_kind_are_refused() -> None:
    custom = parse_config({"agents": {"mine": {"command": "x", "binary": "y"}}}).agents["mine"]
    with pytest.raises(BadInputError, match=re.escape("[agents.mine]: binary only apply to preset agents")):
        CustomAgent("mine", custom, AgentOptions())
    with pytest.raises(BadInputError, match=re.escape("[agents.mine].command is required")):
        CustomAgent("mine", AgentConfig(), AgentOptions())
    preset = AgentOptions(config=parse_config({"agents": {"codex": {"parser": "codex"}}}))
    with pytest.raises(BadInputError, match=re.escape("[agents.codex]: parser cannot apply to the codex preset")):
        PresetAgent(PRESETS["codex"], preset)


def test_config_is_immutable_and_strict() -> None:
    config = parse_config({"providers": {"corp": {"base_url": "http://h/v1"}}})
    with pytest.raises(ValueError, match="frozen"):
        config.providers["corp"].base_url = "http://evil/v1"  # type: ignore[misc]
    bad: dict[str, Any] = {"pricing": {"a/b": {"input": True, "output": 1}}}
    with pytest.raises(BadInputError, match=re.escape('[pricing."a/b"].input: must be a valid number')):
        parse_config(bad)


def test_cli_reports_a_config_error_in_one_line(cli: Callable[..., Result], repo: Path, write_suite: Any) -> None:
    (repo / "worktrial.toml").write_text("[agents.oracle]\nbinary = 3\n")
    result = cli(["eval", "--suite", str(write_suite([task("t")])), "--agent", "oracle", "--trust"], cwd=repo)
    assert result.exit_code == 2
    assert "worktrial.toml: [agents.oracle].binary: must be a valid string" in result.output
    assert "Traceback" not in result.output
