"""A preset's real CLI inside a container, against a scripted model server on this host's loopback (the run's
`--network host`, named explicitly, as the real-agent tests do). The CLI is mounted read-only from its pinned
install (`make agents`): Codex's static build runs in the busybox image, Claude Code's glibc build in a Debian image
(`build-debian-image.sh`, mmdebstrap, cached). Their usage is parsed as on the host."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli_servers import (
    CliServer,
    Plain,
    Request,
    Sse,
    anthropic_plain,
    anthropic_stream,
    chat_has_tool_result,
    chat_plain,
    chat_usage,
    has_tool_result,
)
from tests.real_agents.support import TASK, Served, codex_model_running, installed
from tests.test_containers import (
    BASE_IMAGE,
    EXAMPLES,
    runtime,  # noqa: F401  (the fixture that builds the base image)
)
from worktrial.model.records import Tokens

# The tool call the scripted model makes: solve the task, and say where it ran (a container has
# /run/.containerenv under Podman, /.dockerenv under Docker) and as whom.
SOLVE_AND_LOOK = (
    "mkdir -p notes && echo hi > notes/hello.txt && "
    "{ ls /run/.containerenv /.dockerenv 2>/dev/null; id -u; pwd; } > notes/where.txt"
)


DEBIAN_IMAGE = "localhost/worktrial-base:debian"


@pytest.fixture(scope="module")
def debian_image(runtime: str) -> str:  # noqa: F811
    built = subprocess.run(
        [str(EXAMPLES / "build-debian-image.sh"), runtime, DEBIAN_IMAGE], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        pytest.skip(f"the Debian image could not be built: {built.stderr.strip()[-200:]}")
    return DEBIAN_IMAGE


def _suite(tmp_path: Path, image: str) -> Path:
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"id": "in-container", "environment": {"image": image}, "tasks": [TASK]}))
    return suite


def _where(attempt: dict[str, object]) -> list[str]:
    return (Path(str(attempt["worktree"])) / "notes" / "where.txt").read_text().split()


def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("CODEX_HOME", "OPENAI_BASE_URL", "CODEX_API_KEY", "CLAUDE_CONFIG_DIR", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("IS_SANDBOX", "1")  # the preset checks on the host, where this test runs as root
    monkeypatch.setenv("DISABLE_AUTOUPDATER", "1")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")


def codex_in_container(served: Served) -> Callable[[Request], Sse | Plain]:
    return codex_model_running(served, SOLVE_AND_LOOK)


pytestmark = [pytest.mark.container, pytest.mark.agents, pytest.mark.slow]


def _codex_static(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Codex's npm package carries a static musl build: the program a container of any image can run."""
    tool = installed("codex")
    found = sorted(tool.home.glob("node_modules/@openai/codex-linux-*/vendor/*-linux-musl/bin/codex"))
    if not found:
        pytest.skip("this platform's Codex package has no static build")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "codex").symlink_to(found[0])
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return found[0]


SOLVE_AND_DUMP = (
    "mkdir -p notes && echo hi > notes/hello.txt && env > notes/env.txt && ls /sys/class/net > notes/net.txt"
)


def codex_dumping_its_env(served: Served) -> Callable[[Request], Sse | Plain]:
    return codex_model_running(served, SOLVE_AND_DUMP)


def test_codex_in_a_container_without_network_reaches_its_model_through_the_gateway(
    cli,
    runtime,  # noqa: F811
    repo,
    tmp_path: Path,
    monkeypatch,
) -> None:
    """The container has no network but its loopback: the run's gateway is forwarded into it from the host, and
    Codex holds only the attempt's gateway token, never the key (the gateway adds it outside)."""
    _codex_static(tmp_path, monkeypatch)
    _isolated_home(tmp_path, monkeypatch)
    key = "sk-openai-never-inside-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    served = Served()
    with CliServer(codex_dumping_its_env(served)) as server:
        route = ["--agent", "codex", "--model", "openai/gpt-5", "--base-url", f"{server.url}/v1"]
        envelope = _run(cli, runtime, repo, _suite(tmp_path, BASE_IMAGE), *route, network="off")
        assert all(key in r.headers.get("authorization", "") for r in server.requests if r.method == "POST")
    attempt = _only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["tokens"] == served.tokens.model_dump()
    notes = Path(str(attempt["worktree"])) / "notes"
    assert (notes / "net.txt").read_text().split() == ["lo"]  # no network of its own but its loopback
    seen = (notes / "env.txt").read_text()
    assert key not in seen and "wt-gw-" in seen  # the attempt's gateway token, worthless once it ended


NO_CACHE = {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
"""What the provider says of its cache: the gateway, which counts from the answers, records what they say."""


def claude_in_container(served: Served) -> Callable[[Request], Sse | Plain]:
    """Bash once, then a final message (Anthropic's Messages API); side calls without tools get a short answer."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or "/v1/messages" not in request.path:
            return Plain(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such route"}})
        if "count_tokens" in request.path:
            return Plain(200, {"input_tokens": 10})
        body = request.body
        model = str(body.get("model"))
        if "Bash" not in {t.get("name") for t in body.get("tools", []) if isinstance(t, dict)}:
            served.add(model, Tokens(input=50, output=7, cached_input=0, cache_creation=0))
            usage = {"input_tokens": 50, "output_tokens": 7, **NO_CACHE}
            text = [{"type": "text", "text": "Notes"}]
            if body.get("stream"):
                return anthropic_stream(model, text, usage, "end_turn")
            return anthropic_plain(model, "Notes", usage)
        if not has_tool_result(body.get("messages", [])):
            served.add(model, Tokens(input=1200, output=40, cached_input=0, cache_creation=0))
            call = {"type": "tool_use", "id": "toolu_solve", "name": "Bash", "input": {"command": SOLVE_AND_LOOK}}
            usage = {"input_tokens": 1200, "output_tokens": 40, **NO_CACHE}
            return anthropic_stream(model, [call], usage, "tool_use")
        served.add(model, Tokens(input=1500, output=12, cached_input=0, cache_creation=0))
        done = [{"type": "text", "text": "Created notes/hello.txt."}]
        return anthropic_stream(model, done, {"input_tokens": 1500, "output_tokens": 12, **NO_CACHE}, "end_turn")

    return respond


def mini_in_container(served: Served) -> Callable[[Request], Sse | Plain]:
    """mini-swe-agent's bash tool with the solution, then with its submit command (chat completions)."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/chat/completions"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        model = str(request.body.get("model"))
        if not chat_has_tool_result(request.body.get("messages", [])):
            served.add(model, Tokens(input=1000, cached_input=300, output=50, reasoning=10))
            usage = chat_usage(1000, 50, cached=300, reasoning=10)
            return chat_plain(model, usage, text="Creating it.", call=("bash", {"command": SOLVE_AND_LOOK}))
        served.add(model, Tokens(input=1300, cached_input=1000, output=9, reasoning=2))
        usage = chat_usage(1300, 9, cached=1000, reasoning=2)
        submit = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        return chat_plain(model, usage, text="Done.", call=("bash", {"command": submit}))

    return respond


def _run(cli, program: str, repo: Path, suite: Path, *args: str, network: str = "host") -> dict[str, object]:
    result = cli(
        [
            "eval",
            "--suite",
            str(suite),
            "--trust",
            "--format",
            "json",
            "-q",
            "--runtime",
            program,
            "--network",
            network,
            "--keep-worktrees",
            *args,
        ],
        cwd=repo,
    )
    assert result.exit_code == 0, result.output
    envelope: dict[str, object] = json.loads(result.stdout)
    return envelope


def _only_attempt(envelope: dict[str, object]) -> dict[str, object]:
    report = envelope["report"]
    assert isinstance(report, dict)
    (attempt,) = report["tasks"][0]["attempts"]
    assert isinstance(attempt, dict)
    return attempt


def test_codex_solves_a_task_inside_a_container(cli, runtime, repo, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    _codex_static(tmp_path, monkeypatch)
    _isolated_home(tmp_path, monkeypatch)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test")
    served = Served()
    with CliServer(codex_in_container(served)) as server:
        route = ["--agent", "codex", "--model", "openai/gpt-5", "--base-url", f"{server.url}/v1"]
        envelope = _run(cli, runtime, repo, _suite(tmp_path, BASE_IMAGE), *route)
    attempt = _only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["tokens"] == served.tokens.model_dump()  # parsed from its session files, as on the host
    assert attempt["turns"] == 2
    assert envelope["environment_images"] == {"hello": _image_id(runtime, BASE_IMAGE)}
    where = _where(attempt)
    assert where[0] in ("/run/.containerenv", "/.dockerenv")  # its tool ran inside the container
    assert where[1] != "0" and where[2] == "/app"  # as a non-root user, in the worktree at the documented path


def test_claude_code_solves_a_task_inside_a_container(
    cli,
    runtime,  # noqa: F811
    debian_image,
    repo,
    tmp_path: Path,
    monkeypatch,
) -> None:
    tool = installed("claude-code")
    monkeypatch.setenv("PATH", f"{tool.executable.parent}{os.pathsep}{os.environ['PATH']}")
    _isolated_home(tmp_path, monkeypatch)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    served = Served()
    with CliServer(claude_in_container(served)) as server:
        route = ["--agent", "claude-code", "--model", "anthropic/claude-sonnet-4-5", "--base-url", server.url]
        envelope = _run(cli, runtime, repo, _suite(tmp_path, debian_image), *route, "--max-turns", "8")
    attempt = _only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["tokens"] == served.tokens.model_dump()  # from its stream-json result, as on the host
    where = _where(attempt)
    assert where[0] in ("/run/.containerenv", "/.dockerenv")
    assert where[1] != "0" and where[2] == "/app"


def _image_id(program: str, image: str) -> str:
    out = subprocess.run([program, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True)
    text = out.stdout.strip()
    return text if text.startswith("sha256:") else f"sha256:{text}"


def test_mini_swe_agent_is_installed_into_the_image_and_solves_a_task(
    cli,
    runtime,  # noqa: F811
    debian_image,
    repo,
    tmp_path: Path,
    monkeypatch,
) -> None:
    """A Python CLI cannot run from the host's venv: the same distribution and version go into a cached volume,
    installed with the image's python3 (from the package index: the test needs it reachable)."""
    tool = installed("mini-swe-agent")
    monkeypatch.setenv("PATH", f"{tool.executable.parent}{os.pathsep}{os.environ['PATH']}")
    _isolated_home(tmp_path, monkeypatch)
    for var in ("OPENAI_API_BASE", "MSWEA_MODEL_NAME", "MSWEA_GLOBAL_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm would fetch its price map at start
    monkeypatch.setenv("OPENAI_API_KEY", "sk-mini")
    served = Served()
    with CliServer(mini_in_container(served)) as server:
        route = ["--agent", "mini-swe-agent", "--model", "openai/coder-1", "--base-url", f"{server.url}/v1"]
        envelope = _run(cli, runtime, repo, _suite(tmp_path, debian_image), *route)
    attempt = _only_attempt(envelope)
    assert attempt["outcome"] == "pass", attempt
    assert attempt["turns"] == 2  # from its trajectory file, as on the host
    assert attempt["tokens"] == served.tokens.model_copy(update={"cache_creation": None}).model_dump()
    where = _where(attempt)
    assert where[0] in ("/run/.containerenv", "/.dockerenv")
    assert where[1] != "0" and where[2] == "/app"
    kept = subprocess.run([runtime, "volume", "inspect", "worktrial-tools"], capture_output=True, text=True)
    assert kept.returncode == 0, kept.stderr  # the install stays in the volume for the next run
