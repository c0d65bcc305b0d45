"""The real CLIs set up as their own docs tell a user, under the default sandbox (a network of the attempt's own,
where the host's loopback is out of reach): the endpoint the user configured is where the model calls go (through
the run's gateway, which is how a server on the host's loopback is reached at all), the vendor's host is never
contacted, no key of the user's is anywhere inside the sandbox, and the usage is what the server served.

The "vendor" is the HTTPS proxy every outbound connection of the harness goes through (``HTTPS_PROXY``): a
recorder that carries nothing and notes each host it is asked for. The key scan is a script the scripted model
runs as its shell command inside the attempt: it looks for the key in the environment, in every process's
environment and in every file the sandbox shows.

Then, per CLI family (Node: Claude Code; a static binary: Codex; Python: mini-swe-agent), a provider that never
answers is ``provider_slow`` and one that cuts its stream is ``provider_stream_cut``, never the agent's doing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.cli_servers import (
    CliServer,
    Plain,
    ProxyRecorder,
    Request,
    Sse,
    anthropic_stream,
    chat_has_tool_result,
    chat_plain,
    chat_stream,
    chat_usage,
    gemini_has_function_response,
    gemini_stream,
    gemini_usage,
    has_tool_result,
)
from tests.conftest import git
from tests.real_agents.support import (
    SOLVE,
    TASK,
    Served,
    assert_nothing_left,
    codex_model_running,
    home,
    installed,
    marker,
    on_path,
)
from worktrial.model.records import Tokens

pytestmark = [pytest.mark.agents, pytest.mark.slow, pytest.mark.sandbox]
KEY = "sk-users-own-key-never-in-the-sandbox-0123456789"
SCAN = r"""
import json, os, sys
key = bytes.fromhex(sys.argv[1])[::-1]  # the key is never written out whole: only what leaked is found
found = []
if key in "\n".join(f"{k}={v}" for k, v in os.environ.items()).encode():
    found.append("environment")
system = ("/proc", "/sys", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
programs = {"node_modules", "site-packages", ".venv", ".git"}  # the CLIs' and Python's own files, shown read-only
for root, dirs, files in os.walk("/"):
    if root != "/" and root.startswith(system) or programs & set(root.split("/")):
        dirs[:] = []
        continue
    for name in files:
        path = os.path.join(root, name)
        try:
            if os.path.isfile(path) and os.path.getsize(path) <= 1 << 20:
                with open(path, "rb") as fh:
                    if key in fh.read():
                        found.append(path)
        except OSError:
            pass
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            if key in fh.read():
                found.append(f"/proc/{pid}/environ")
    except OSError:
        pass
json.dump({"found": found}, open("scan.json", "w"))
"""
SCAN_AND_SOLVE = f"python3 scan.py {KEY.encode()[::-1].hex()} && {SOLVE}"
SETUP_TASK = dict(TASK, timeout_secs=180)


@pytest.fixture
def vendor(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProxyRecorder]:
    with ProxyRecorder() as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        yield proxy


@pytest.fixture
def sandboxed(repo: Path) -> Path:
    """The repository, with the key scan committed for the scripted model to run."""
    if shutil.which("slirp4netns") is None:  # bubblewrap's absence skips the module (the sandbox marker)
        pytest.skip("the default sandbox's own network needs slirp4netns: make sandbox")
    (repo / "scan.py").write_text(SCAN)
    git(repo, "add", "scan.py")
    git(repo, "commit", "-q", "-m", "scan")
    return repo


def evaluate_sandboxed(
    cli: Callable[..., Result], repo: Path, suite: Path, *args: str
) -> tuple[Result, dict[str, Any] | None]:
    """``worktrial eval`` under the default sandbox (no --network flag), worktrees kept for the scan's result."""
    argv = ["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", "--keep-worktrees", *args]
    result = cli(argv, cwd=repo)
    return result, json.loads(result.stdout) if result.exit_code == 0 else None


def settled(envelope: dict[str, Any] | None, result: Result, vendor: ProxyRecorder, host: str) -> dict[str, Any]:
    """The one attempt passed in the default sandbox, the key was nowhere inside, the vendor never reached."""
    assert envelope is not None, result.output
    assert envelope["run"]["sandbox"]["kind"] == "bubblewrap" and envelope["run"]["sandbox"]["network"] == "on"
    attempt: dict[str, Any] = envelope["report"]["tasks"][0]["attempts"][0]
    assert attempt["outcome"] == "pass", attempt
    assert json.loads((Path(attempt["worktree"]) / "scan.json").read_text()) == {"found": []}
    assert host not in vendor.hosts
    return attempt


def keys_seen(server: CliServer) -> set[str | None]:
    return {r.headers.get("x-api-key") or r.headers.get("authorization") for r in server.requests if r.method == "POST"}


# ---- scripted models that run the scan, then finish ------------------------------------------------------------------


def responses_model(served: Served, command: str = SCAN_AND_SOLVE) -> Callable[[Request], Sse | Plain]:
    return codex_model_running(served, command)


def messages_model(served: Served, command: str = SCAN_AND_SOLVE) -> Callable[[Request], Sse | Plain]:
    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or "/v1/messages" not in request.path:
            return Plain(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}})
        if "count_tokens" in request.path:
            return Plain(200, {"input_tokens": 10})
        body = request.body
        model = str(body.get("model"))
        if "Bash" not in {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}:
            served.add(model, Tokens(input=50, output=7))
            return anthropic_stream(
                model, [{"type": "text", "text": "Notes"}], {"input_tokens": 50, "output_tokens": 7}, "end_turn"
            )
        if not has_tool_result(body.get("messages", [])):
            served.add(model, Tokens(input=1200, output=40))
            call = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": command}}
            return anthropic_stream(model, [call], {"input_tokens": 1200, "output_tokens": 40}, "tool_use")
        served.add(model, Tokens(input=1500, output=12))
        text = [{"type": "text", "text": "Done."}]
        return anthropic_stream(model, text, {"input_tokens": 1500, "output_tokens": 12}, "end_turn")

    return respond


def chat_model(served: Served, shell_tool: str, command: str = SCAN_AND_SOLVE) -> Callable[[Request], Sse | Plain]:
    """Streamed Chat Completions: the shell tool once, then a final message; calls without tools get a title."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/chat/completions"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        body = request.body
        model = str(body.get("model"))
        if not body.get("tools"):
            served.add(model, Tokens(input=40, cached_input=0, output=6, reasoning=0))
            return chat_stream(model, chat_usage(40, 6), text="A title")
        if not chat_has_tool_result(body.get("messages", [])):
            served.add(model, Tokens(input=1000, cached_input=300, output=50, reasoning=10))
            call = (shell_tool, {"command": command, "description": "solve"})
            return chat_stream(model, chat_usage(1000, 50, cached=300, reasoning=10), call=call)
        served.add(model, Tokens(input=1300, cached_input=1000, output=9, reasoning=2))
        return chat_stream(model, chat_usage(1300, 9, cached=1000, reasoning=2), text="Done.")

    return respond


def gemini_model(served: Served, command: str = SCAN_AND_SOLVE) -> Callable[[Request], Sse | Plain]:
    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or "/models/" not in request.path:
            return Plain(404, {"error": {"code": 404, "message": "no such route", "status": "NOT_FOUND"}})
        model = request.path.split("/models/", 1)[1].split(":", 1)[0]
        if not gemini_has_function_response(request.body.get("contents", [])):
            call = {"functionCall": {"name": "run_shell_command", "args": {"command": command, "description": "x"}}}
            served.add(model, Tokens(input=700, cached_input=0, output=45, reasoning=0))
            return gemini_stream(model, [call], gemini_usage(700, 45))
        served.add(model, Tokens(input=900, cached_input=0, output=8, reasoning=0))
        return gemini_stream(model, [{"text": "Done."}], gemini_usage(900, 8))

    return respond


# ---- each CLI as its docs set it up ----------------------------------------------------------------------------------


def test_codex_logged_in_with_an_api_key(
    home: Path, sandboxed: Path, vendor: ProxyRecorder, cli: Callable[..., Result], write_suite, monkeypatch
) -> None:
    """``codex login --with-api-key`` (the real CLI) keeps the key in ~/.codex/auth.json, and OPENAI_BASE_URL names
    the user's endpoint: the gateway sends the key there; auth.json never enters the sandbox."""
    tool = installed("codex")
    on_path(monkeypatch, tool)
    login = subprocess.run(
        [str(tool.executable), "login", "--with-api-key"], input=KEY, text=True, capture_output=True, timeout=60
    )
    assert login.returncode == 0, login.stderr
    assert json.loads((home / ".codex" / "auth.json").read_text())["OPENAI_API_KEY"] == KEY
    served = Served()
    with CliServer(responses_model(served)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        result, envelope = evaluate_sandboxed(
            cli, sandboxed, write_suite([SETUP_TASK]), "--agent", "codex", "--model", "gpt-5"
        )
        keys = keys_seen(server)
    attempt = settled(envelope, result, vendor, "api.openai.com")
    assert keys == {f"Bearer {KEY}"}
    assert attempt["tokens"] == served.tokens.model_dump()
    assert envelope is not None and envelope["agent"]["upstream"] == {
        "route": "openai",
        "base_url": f"{server.url}/v1",
        "from": "OPENAI_BASE_URL",
    }
    assert json.loads((home / ".codex" / "auth.json").read_text())["OPENAI_API_KEY"] == KEY  # never modified
    assert_nothing_left()


def test_claude_code_with_a_gateway_in_its_settings(
    home: Path, sandboxed: Path, vendor: ProxyRecorder, cli: Callable[..., Result], write_suite, monkeypatch
) -> None:
    """Claude Code's LLM-gateway setup: ANTHROPIC_BASE_URL and the key in ~/.claude/settings.json's env."""
    on_path(monkeypatch, installed("claude-code"))
    served = Served()
    with CliServer(messages_model(served)) as server:
        settings = {"env": {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": KEY}, "model": "claude-sonnet-4-5"}
        (home / ".claude").mkdir()
        (home / ".claude" / "settings.json").write_text(json.dumps(settings))
        result, envelope = evaluate_sandboxed(cli, sandboxed, write_suite([SETUP_TASK]), "--agent", "claude-code")
        keys = keys_seen(server)
    attempt = settled(envelope, result, vendor, "api.anthropic.com")
    assert keys == {KEY}
    assert attempt["tokens"] == served.tokens.model_dump()
    assert json.loads((home / ".claude" / "settings.json").read_text()) == settings
    assert_nothing_left()


def test_qwen_code_as_its_readme_says(
    home: Path, sandboxed: Path, vendor: ProxyRecorder, cli: Callable[..., Result], write_suite, monkeypatch
) -> None:
    """The README's ~/.qwen/settings.json: a modelProviders entry, its key in the file's env, the auth type and the
    model. Each attempt has its own QWEN_HOME: the user's file is neither read in place nor rewritten."""
    on_path(monkeypatch, installed("qwen-code"))
    served = Served()
    with CliServer(chat_model(served, "run_shell_command")) as server:
        settings = {
            "modelProviders": {
                "openai": [
                    {"id": "coder-1", "name": "coder-1", "baseUrl": f"{server.url}/v1", "envKey": "DASHSCOPE_API_KEY"}
                ]
            },
            "env": {"DASHSCOPE_API_KEY": KEY},
            "security": {"auth": {"selectedType": "openai"}},
            "model": {"name": "coder-1"},
        }
        (home / ".qwen").mkdir()
        (home / ".qwen" / "settings.json").write_text(json.dumps(settings, indent=2))
        before = (home / ".qwen" / "settings.json").read_bytes()
        result, envelope = evaluate_sandboxed(cli, sandboxed, write_suite([SETUP_TASK]), "--agent", "qwen-code")
        keys = keys_seen(server)
    attempt = settled(envelope, result, vendor, "dashscope.aliyuncs.com")
    assert keys == {f"Bearer {KEY}"} and set(served.models) == {"coder-1"}
    assert attempt["tokens"] == served.tokens.model_dump()
    assert (home / ".qwen" / "settings.json").read_bytes() == before
    assert sorted(p.name for p in (home / ".qwen").iterdir()) == ["settings.json"]  # no .orig, no sessions
    assert_nothing_left()


def test_gemini_cli_with_its_api_key_variable(
    home: Path, sandboxed: Path, vendor: ProxyRecorder, cli: Callable[..., Result], write_suite, monkeypatch
) -> None:
    """GEMINI_API_KEY and the endpoint's variable, no settings file: headless Gemini CLI needs an auth type, which
    the attempt's copy of its settings gets (it used to print "Invalid auth method selected" and make no call)."""
    on_path(monkeypatch, installed("gemini-cli"))
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    served = Served()
    with CliServer(gemini_model(served)) as server:
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", server.url)
        args = ("--agent", "gemini-cli", "--model", "gemini-2.5-pro")
        result, envelope = evaluate_sandboxed(cli, sandboxed, write_suite([SETUP_TASK]), *args)
        keys = {r.headers.get("x-goog-api-key") for r in server.requests if r.method == "POST"}
    attempt = settled(envelope, result, vendor, "generativelanguage.googleapis.com")
    assert keys == {KEY}
    assert attempt["tokens"] == served.tokens.model_dump()
    assert not (home / ".gemini").exists()
    assert_nothing_left()


def test_opencode_with_its_auth_login_key(
    home: Path, sandboxed: Path, vendor: ProxyRecorder, cli: Callable[..., Result], write_suite, monkeypatch
) -> None:
    """A provider of the user's own in opencode.json and its key where ``opencode auth login`` keeps it."""
    on_path(monkeypatch, installed("opencode"))
    served = Served()
    with CliServer(chat_model(served, "bash")) as server:
        config = {
            "provider": {
                "scripted": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "Scripted",
                    "options": {"baseURL": f"{server.url}/v1"},
                    "models": {"coder-1": {"name": "coder-1"}},
                }
            },
            "model": "scripted/coder-1",
        }
        (home / ".config" / "opencode").mkdir(parents=True)
        (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(config))
        (home / ".local" / "share" / "opencode").mkdir(parents=True)
        (home / ".local" / "share" / "opencode" / "auth.json").write_text(
            json.dumps({"scripted": {"type": "api", "key": KEY}})
        )
        result, envelope = evaluate_sandboxed(cli, sandboxed, write_suite([SETUP_TASK]), "--agent", "opencode")
        keys = keys_seen(server)
    attempt = settled(envelope, result, vendor, "api.openai.com")
    assert keys == {f"Bearer {KEY}"}
    assert attempt["tokens"]["input"] == served.tokens.input  # every call the server served, titles included
    assert_nothing_left()


def test_gptme_with_a_local_server_in_its_config(
    home: Path, sandboxed: Path, vendor: ProxyRecorder, cli: Callable[..., Result], write_suite, monkeypatch
) -> None:
    """gptme's config.toml [env] names a local server (``local/`` models), its key and the model."""
    on_path(monkeypatch, installed("gptme"))
    served = Served()
    with CliServer(chat_model(served, "shell")) as server:
        (home / ".config" / "gptme").mkdir(parents=True)
        (home / ".config" / "gptme" / "config.toml").write_text(
            f'[env]\nOPENAI_BASE_URL = "{server.url}/v1"\nOPENAI_API_KEY = "{KEY}"\nMODEL = "local/coder-1"\n'
        )
        result, envelope = evaluate_sandboxed(cli, sandboxed, write_suite([SETUP_TASK]), "--agent", "gptme")
        keys = keys_seen(server)
    attempt = settled(envelope, result, vendor, "api.openai.com")
    assert keys == {f"Bearer {KEY}"}
    assert attempt["tokens"]["input"] == served.tokens.input
    assert_nothing_left()


def test_grok_cli_with_its_key_and_endpoint_variables(
    home: Path, sandboxed: Path, vendor: ProxyRecorder, cli: Callable[..., Result], write_suite, monkeypatch
) -> None:
    """Grok CLI's README: GROK_API_KEY, and GROK_BASE_URL for a custom endpoint. It asks for whole answers."""
    on_path(monkeypatch, installed("grok-cli"))
    monkeypatch.setenv("GROK_API_KEY", KEY)
    served = Served()

    def respond(request: Request) -> Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/chat/completions"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        model = str(request.body.get("model"))
        if not chat_has_tool_result(request.body.get("messages", [])):
            served.add(model, Tokens(input=1000, cached_input=300, output=50, reasoning=0))
            usage = chat_usage(1000, 50, cached=300)
            return chat_plain(model, usage, call=("bash", {"command": SCAN_AND_SOLVE}))
        served.add(model, Tokens(input=1300, cached_input=0, output=9, reasoning=0))
        return chat_plain(model, chat_usage(1300, 9), text="Done.")

    with CliServer(respond) as server:
        monkeypatch.setenv("GROK_BASE_URL", f"{server.url}/v1")
        result, envelope = evaluate_sandboxed(cli, sandboxed, write_suite([SETUP_TASK]), "--agent", "grok-cli")
        keys = keys_seen(server)
    attempt = settled(envelope, result, vendor, "api.x.ai")
    assert keys == {f"Bearer {KEY}"} and set(served.models) == {"grok-code-fast-1"}
    assert attempt["tokens"] == served.tokens.model_dump()
    assert attempt["turns"] == 2 and attempt["tool_calls"] == 1
    assert not (home / ".grok").exists()  # its settings went to the attempt's own home
    assert_nothing_left()


# ---- a slow provider, a cut stream: never the agent's ------------------------------------------------------------


FAMILIES = {
    "claude-code": ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY", ""),
    "codex": ("openai/gpt-5", "OPENAI_API_KEY", "/v1"),
    "mini-swe-agent": ("openai/coder-1", "OPENAI_API_KEY", "/v1"),
}
"""Node (Claude Code), a static binary (Codex), Python (mini-swe-agent): the model, the key variable, the path."""


def trouble(agent: str, kind: str, release: threading.Event) -> Callable[[Request], Sse | Plain]:
    """Every model call waits until the test is over (``slow``) or is cut halfway through its answer (``cut``)."""
    served = Served()
    normal = {"claude-code": messages_model(served), "codex": responses_model(served)}.get(agent)

    def respond(request: Request) -> Sse | Plain:
        answer = normal(request) if normal is not None else chat_plain("coder-1", chat_usage(10, 2), text="x")
        if request.method != "POST" or (isinstance(answer, Plain) and answer.status == 404):
            return answer
        if kind == "slow":
            release.wait(300)
            return answer
        if isinstance(answer, Sse):
            answer.cut_after = 2
            return answer
        return Plain(answer.status, answer.body, cut=True)

    return respond


@pytest.mark.parametrize("kind", ["slow", "cut"])
@pytest.mark.parametrize("agent", sorted(FAMILIES))
def test_provider_trouble_is_never_the_agents(
    home: Path, sandboxed: Path, cli: Callable[..., Result], write_suite, monkeypatch, agent: str, kind: str
) -> None:
    model, key_var, path = FAMILIES[agent]
    on_path(monkeypatch, installed(agent))
    monkeypatch.setenv(key_var, KEY)
    monkeypatch.setenv("CLAUDE_CODE_MAX_RETRIES", "1")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    release = threading.Event()
    with CliServer(trouble(agent, kind, release)) as server:
        try:
            args = ("--agent", agent, "--model", model, "--base-url", f"{server.url}{path}", "--grace-secs", "2")
            result, _ = evaluate_sandboxed(cli, sandboxed, write_suite([dict(TASK, timeout_secs=40)]), *args)
        finally:
            release.set()
    assert result.exit_code == 1, result.output  # every attempt ended in error: the run measured nothing
    attempt = json.loads(result.stdout)["report"]["tasks"][0]["attempts"][0]
    category = {"slow": "provider_slow", "cut": "provider_stream_cut"}[kind]
    assert (attempt["outcome"], attempt["error_category"]) == ("error", category), attempt
    assert "model gateway" in attempt["reason"]
    assert "fix the setup" not in result.stderr and "Traceback" not in result.output
    assert_nothing_left()


__all__ = ["home", "marker"]  # fixtures, imported for pytest
