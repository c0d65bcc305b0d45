"""Which of the caller's variables each child process sees: setup and verify commands a minimal environment, agents
an allow-list, plus their own provider's variables or what --pass-env names. Real git, real processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.builtin_support import write_user_config
from tests.conftest import task
from tests.fakes import install_fake, invocations, share_with_sandbox
from tests.fakes.streams import SCENARIOS
from tests.test_presets_e2e import FakeEnv, fake_env
from worktrial.gateway.session import TOKEN_PREFIX
from worktrial.isolation.childenv import AGENT_NAMES, command_env
from worktrial.redaction import is_credential_name

__all__ = ["fake_env"]

PLANTED = {
    "OPENAI_API_KEY": "sk-planted-openai-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-planted-0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws-planted-secret-0123456789",
    "MY_SERVICE_TOKEN": "tok-planted-0123456789",
}
# A shell test that fails iff any planted credential is set (set at all, even empty).
NONE_SET = " && ".join(f'test -z "${{{name}+x}}"' for name in PLANTED)


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MY_PLAIN_SETTING", "plain-value")


def _eval(cli: Any, repo: Path, suite: Path, *extra: str) -> dict[str, Any]:
    result = cli(["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", *extra], cwd=repo)
    assert result.exit_code in (0, 1), result.output
    envelope: dict[str, Any] = json.loads(result.stdout)
    return envelope


def _outcomes(envelope: dict[str, Any]) -> dict[str, str]:
    return {t["task_id"]: t["attempts"][0]["outcome"] for t in envelope["report"]["tasks"]}


def _reasons(envelope: dict[str, Any]) -> dict[str, str | None]:
    return {t["task_id"]: t["attempts"][0]["reason"] for t in envelope["report"]["tasks"]}


def test_setup_and_verify_commands_never_see_the_callers_keys(
    cli: Any, repo: Path, write_suite: Any, planted: None
) -> None:
    home = str(Path.home())
    minimal = f'{NONE_SET} && test -z "${{MY_PLAIN_SETTING+x}}" && test "$HOME" != "{home}" && test -d "$HOME"'
    checks = [{"sh": minimal}, "test -f done.txt"]
    suite = write_suite(
        [
            # A slot with environment setup (pooled), and a task without one (a worktree of its own).
            task(
                "pooled",
                environment={"setup": [{"sh": minimal}]},
                setup_commands=[{"sh": minimal}],
                verify_commands=checks,
            ),
            task("plain", setup_commands=[{"sh": minimal}], verify_commands=checks),
        ]
    )
    envelope = _eval(cli, repo, suite, "--agent", "oracle")
    assert _outcomes(envelope) == {"pooled": "pass", "plain": "pass"}, _reasons(envelope)


def test_a_verify_that_needs_the_callers_key_never_gets_it(cli: Any, repo: Path, write_suite: Any) -> None:
    """The converse of the test above (which could pass vacuously): a verify that requires the key fails."""
    suite = write_suite([task("needs-key", verify_commands=[{"sh": 'test -n "$OPENAI_API_KEY"'}])])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", PLANTED["OPENAI_API_KEY"])
        envelope = _eval(cli, repo, suite, "--agent", "oracle")
    assert _outcomes(envelope) == {"needs-key": "fail"}


def test_verify_runs_with_a_fresh_home_the_agent_never_saw(cli: Any, repo: Path, write_suite: Any) -> None:
    """An agent that plants files in every home it can find (a ``usercustomize.py`` would make every Python verify
    import its code) does not reach verification's home: it is made after the agent ended."""
    plant = (
        'for d in "$WORKTRIAL_SCRATCH"/home "$WORKTRIAL_SCRATCH"/home-*; do mkdir -p "$d" && '
        'touch "$d/usercustomize.py"; done; echo done > done.txt'
    )
    empty_home = {"sh": 'test -d "$HOME" && test -z "$(ls -A "$HOME")"'}
    suite = write_suite([task("t", setup_commands=[{"sh": "touch $HOME/from-setup"}], verify_commands=[empty_home])])
    envelope = _eval(cli, repo, suite, "--agent-cmd", plant)
    assert _outcomes(envelope) == {"t": "pass"}, _reasons(envelope)


def test_a_command_agent_sees_a_credential_only_with_pass_env(
    cli: Any, repo: Path, write_suite: Any, planted: None
) -> None:
    sees_token = 'test -n "$MY_SERVICE_TOKEN" && echo done > done.txt'
    suite = write_suite([task("t")])
    assert _outcomes(_eval(cli, repo, suite, "--agent-cmd", sees_token)) == {"t": "fail"}
    envelope = _eval(cli, repo, suite, "--agent-cmd", sees_token, "--pass-env", "MY_SERVICE_TOKEN")
    assert _outcomes(envelope) == {"t": "pass"}
    assert envelope["agent"]["pass_env"] == ["MY_SERVICE_TOKEN"]  # names only, never values
    assert PLANTED["MY_SERVICE_TOKEN"] not in json.dumps(envelope)
    assert _outcomes(_eval(cli, repo, suite, "--agent-cmd", sees_token, "--pass-env", "MY_SERVICE_*")) == {"t": "pass"}

    # Passing one variable passes no other, and a variable that names no secret needs --pass-env like any other.
    others = " && ".join(f'test -z "${{{name}+x}}"' for name in PLANTED if name != "MY_SERVICE_TOKEN")
    only_that = f'test "$MY_PLAIN_SETTING" = plain-value && {others}'
    agent = f"{only_that} && echo done > done.txt"
    assert _outcomes(_eval(cli, repo, suite, "--agent-cmd", agent, "--pass-env", "MY_SERVICE_TOKEN")) == {"t": "fail"}
    passed = ("--pass-env", "MY_SERVICE_TOKEN", "--pass-env", "MY_PLAIN_SETTING")
    assert _outcomes(_eval(cli, repo, suite, "--agent-cmd", agent, *passed)) == {"t": "pass"}


UNNAMED_SECRETS = {
    "DB_PASS": "hunter2-db-pass-value",
    "DATABASE_URL": "postgres://app:s3cr3t-db@db.internal/prod",
    "HTTPS_PROXY": "http://proxyuser:proxy-s3cret@proxy.internal:3128",
    "CI_JOB_JWT": "eyJhbGciOi.planted-ci-job-jwt",
    "SLACK_WEBHOOK": "https://hooks.example.invalid/services/T000/B000/planted",
    "SENTRY_DSN": "https://planted0dsn@sentry.example.invalid/42",
}
NEVER = {
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/0/bus",
    "XDG_RUNTIME_DIR": "/run/user/0",
    "SSH_AUTH_SOCK": "/tmp/ssh-planted/agent.1",
}


def test_a_command_agent_gets_an_allow_list_not_everything_but_known_secret_names(
    cli: Any, repo: Path, write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Secrets whose names say nothing (DB_PASS, DATABASE_URL, a proxy URL with a password, a CI job token, webhook
    URLs, DSNs) never reach a command agent; one the user passes does, and is redacted wherever the agent prints it;
    the session bus, runtime directory and ssh agent are never passed, not even when asked for."""
    for name, value in {**UNNAMED_SECRETS, **NEVER}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    suite = write_suite([task("t")])
    dump = "env > env.txt; cat env.txt; echo done > done.txt"
    envelope = _eval(cli, repo, suite, "--agent-cmd", dump, "--keep-worktrees")
    assert _outcomes(envelope) == {"t": "pass"}
    seen = dict(
        line.split("=", 1) for line in (Path(_kept(envelope)) / "env.txt").read_text().splitlines() if "=" in line
    )
    assert not set(seen) & {*UNNAMED_SECRETS, *NEVER}, sorted(seen)
    assert seen["LC_ALL"] == "C.UTF-8" and "PATH" in seen and "HOME" in seen
    assert {name for name in seen if name.startswith("WORKTRIAL_")}  # the contract variables
    stray = set(seen) - AGENT_NAMES - {"PWD", "SHLVL", "_", "OLDPWD"}  # the last ones the shell sets itself
    assert all(n.startswith(("WORKTRIAL_", "LC_")) for n in stray), stray

    # Asked for, a secret with any name reaches the agent, and what it prints of it is stored redacted.
    asked = ("--pass-env", "DATABASE_URL", "--pass-env", "HTTPS_PROXY", "--pass-env", "SSH_AUTH_SOCK")
    envelope = _eval(cli, repo, suite, "--agent-cmd", dump, "--keep-worktrees", *asked)
    seen = dict(
        line.split("=", 1) for line in (Path(_kept(envelope)) / "env.txt").read_text().splitlines() if "=" in line
    )
    assert (
        seen["DATABASE_URL"] == UNNAMED_SECRETS["DATABASE_URL"]
        and seen["HTTPS_PROXY"] == UNNAMED_SECRETS["HTTPS_PROXY"]
    )
    assert "SSH_AUTH_SOCK" not in seen and "DB_PASS" not in seen
    stored = "".join(p.read_text(errors="replace") for p in (repo / ".worktrial").rglob("*") if p.is_file())
    for value in (UNNAMED_SECRETS["DATABASE_URL"], UNNAMED_SECRETS["HTTPS_PROXY"]):
        assert value not in stored  # printed to stdout by the agent, kept redacted in its artifacts
    assert "[REDACTED]" in stored


def _kept(envelope: dict[str, Any]) -> str:
    worktree: str = envelope["report"]["tasks"][0]["attempts"][0]["worktree"]
    return worktree


def test_a_custom_agent_gets_what_its_pass_env_names(cli: Any, repo: Path, write_suite: Any, planted: None) -> None:
    write_user_config(
        '[agents.mine]\ncommand = "test -n \\"$AWS_SECRET_ACCESS_KEY\\" && echo done > done.txt"\n'
        'pass_env = ["AWS_*"]\n'
    )
    envelope = _eval(cli, repo, write_suite([task("t")]), "--agent", "mine")
    assert _outcomes(envelope) == {"t": "pass"} and envelope["agent"]["pass_env"] == ["AWS_*"]


def test_bad_pass_env_is_one_line(cli: Any, repo: Path, write_suite: Any) -> None:
    result = cli(
        ["eval", "--suite", str(write_suite([task("t")])), "--trust", "--agent-cmd", "true", "--pass-env", "A B"],
        cwd=repo,
    )
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert "--pass-env 'A B' is not a variable name" in line


def _recorded_env(fake_env: FakeEnv, binary: str) -> dict[str, str]:
    (run,) = invocations(fake_env.log_dir, binary)
    env: dict[str, str] = run["env"]
    return env


def test_a_preset_sees_its_own_providers_key_but_not_anothers(
    cli: Any, repo: Path, write_suite: Any, fake_env: FakeEnv, planted: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    watched = [*PLANTED, "MY_PLAIN_SETTING", "CODEX_API_KEY", "SCRIPTED_PROVIDER_KEY"]
    for preset in ("claude-code", "codex"):
        binary, scenarios = SCENARIOS[preset]
        install_fake(fake_env.bin_dir, binary, {k: {**v, "record_env": watched} for k, v in scenarios.items()})
    suite = write_suite([task("t", prompt="Create done.txt [scenario:normal]")])

    # Its provider is routed through the run's model gateway: the key variable holds the attempt's token, never
    # the key (docs/gateway.md).
    assert _outcomes(_eval(cli, repo, suite, "--agent", "claude-code")) == {"t": "pass"}
    seen = _recorded_env(fake_env, "claude")
    assert list(seen) == ["ANTHROPIC_API_KEY"] and seen["ANTHROPIC_API_KEY"].startswith(TOKEN_PREFIX)

    # Codex: a token for the OpenAI key (also as CODEX_API_KEY, which Codex reads), and the variable the user's own
    # ~/.codex/config.toml names as a provider's env_key; never Anthropic's key or AWS credentials.
    monkeypatch.setenv("SCRIPTED_PROVIDER_KEY", "sk-scripted-provider-0123")
    (fake_env.home / ".codex").mkdir()
    (fake_env.home / ".codex" / "config.toml").write_text('[model_providers.x]\nenv_key = "SCRIPTED_PROVIDER_KEY"\n')
    assert _outcomes(_eval(cli, repo, suite, "--agent", "codex")) == {"t": "pass"}
    seen = _recorded_env(fake_env, "codex")
    assert seen.pop("OPENAI_API_KEY") == seen.pop("CODEX_API_KEY") != PLANTED["OPENAI_API_KEY"]
    assert seen == {
        "SCRIPTED_PROVIDER_KEY": "sk-scripted-provider-0123",
    }  # MY_PLAIN_SETTING is no provider's: a preset gets it only with --pass-env, like a command agent


def test_a_preset_gets_more_only_when_the_user_says_so(
    cli: Any, repo: Path, write_suite: Any, fake_env: FakeEnv, planted: None
) -> None:
    binary, scenarios = SCENARIOS["claude-code"]
    install_fake(fake_env.bin_dir, binary, {k: {**v, "record_env": list(PLANTED)} for k, v in scenarios.items()})
    write_user_config('[agents.claude-code]\npass_env = ["AWS_*"]\n')  # e.g. Claude Code on Bedrock
    share_with_sandbox(fake_env.log_dir)  # the user config was just rewritten: share the fakes' log again
    suite = write_suite([task("t", prompt="Create done.txt [scenario:normal]")])
    envelope = _eval(cli, repo, suite, "--agent", "claude-code", "--pass-env", "MY_SERVICE_TOKEN")
    assert _outcomes(envelope) == {"t": "pass"}
    seen = _recorded_env(fake_env, "claude")
    assert seen.pop("ANTHROPIC_API_KEY").startswith(TOKEN_PREFIX)  # routed through the gateway
    assert seen == {
        "AWS_SECRET_ACCESS_KEY": PLANTED["AWS_SECRET_ACCESS_KEY"],
        "MY_SERVICE_TOKEN": PLANTED["MY_SERVICE_TOKEN"],
    }
    assert envelope["agent"]["pass_env"] == ["AWS_*", "MY_SERVICE_TOKEN"]


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("OPENAI_API_KEY", True),
        ("ANTHROPIC_AUTH_TOKEN", True),
        ("GITHUB_TOKEN", True),
        ("MY_SERVICE_SECRET", True),
        ("DB_PASSWORD", True),
        ("PGPASSWORD", True),
        ("AWS_REGION", True),
        ("AWS_SESSION_TOKEN", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("SSH_AUTH_SOCK", True),
        ("OPENAI_API_KEY_2", True),
        ("hf_token", True),
        ("OPENAI_BASE_URL", False),
        ("PATH", False),
        ("HOME", False),
        ("KEYTIMEOUT", False),
        ("XAUTHORITY", False),
        ("PWD", False),
        ("MONKEY", False),
        ("LANG", False),
    ],
)
def test_which_names_are_credential_like(name: str, credential: bool) -> None:
    assert is_credential_name(name) is credential


def test_command_env_is_an_allow_list(tmp_path: Path) -> None:
    caller = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TERM": "xterm",
        "TZ": "UTC",
        "TMPDIR": "/tmp/x",
        "HTTPS_PROXY": "http://proxy:3128",
        "HOME": "/home/user",
        "OPENAI_API_KEY": "sk-x",
        "EDITOR": "vim",
        "PYTHONPATH": "/somewhere",
    }
    env = command_env(caller, tmp_path / "home", {"WORKTRIAL_SUITE_DIR": "/suite"})
    assert env == {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TERM": "xterm",
        "TZ": "UTC",
        "TMPDIR": "/tmp/x",
        "HTTPS_PROXY": "http://proxy:3128",
        "HOME": str(tmp_path / "home"),
        "WORKTRIAL_SUITE_DIR": "/suite",
    }
    assert (tmp_path / "home").is_dir()
