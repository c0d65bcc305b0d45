"""A preset's real CLI inside a container, against a scripted model server on this host's loopback (the run's
`--network host`, named explicitly, as the real-agent tests do): Codex's static build runs in the busybox image,
mounted read-only from the pinned install, and its usage is parsed as on the host."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli_servers import (
    CliServer,
    Plain,
    Request,
    Sse,
    has_tool_result,
    responses_function_call,
    responses_message,
    responses_stream,
    responses_usage,
)
from tests.real_agents.support import TASK, Served, installed
from tests.test_containers import BASE_IMAGE, runtime  # noqa: F401  (the fixture that builds the base image)
from worktrial.model.records import Tokens

# The tool call the scripted model makes: solve the task, and say where it ran (a container has
# /run/.containerenv under Podman, /.dockerenv under Docker) and as whom.
SOLVE_AND_LOOK = (
    "mkdir -p notes && echo hi > notes/hello.txt && "
    "{ ls /run/.containerenv /.dockerenv 2>/dev/null; id -u; pwd; } > notes/where.txt"
)


def codex_in_container(served: Served) -> Callable[[Request], Sse | Plain]:
    """exec_command once, then a final message (the Responses API, as Codex speaks it)."""

    def respond(request: Request) -> Sse | Plain:
        if request.method != "POST" or not request.path.split("?")[0].endswith("/responses"):
            return Plain(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
        model = str(request.body.get("model"))
        if not has_tool_result(request.body.get("input", [])):
            served.add(model, Tokens(input=900, cached_input=300, output=60, reasoning=20, cache_creation=0))
            call = responses_function_call("exec_command", {"cmd": SOLVE_AND_LOOK})
            return responses_stream(model, [call], responses_usage(900, 300, 60, 20))
        served.add(model, Tokens(input=1100, cached_input=800, output=15, reasoning=5, cache_creation=0))
        return responses_stream(model, [responses_message("Done.")], responses_usage(1100, 800, 15, 5))

    return respond


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


def test_codex_solves_a_task_inside_a_container(cli, runtime, repo, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    _codex_static(tmp_path, monkeypatch)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("CODEX_HOME", "OPENAI_BASE_URL", "CODEX_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-test")
    suite = tmp_path / "suite.json"
    suite.write_text(
        json.dumps({"id": "in-container", "environment": {"image": BASE_IMAGE, "workdir": "/app"}, "tasks": [TASK]})
    )
    served = Served()
    with CliServer(codex_in_container(served)) as server:
        args = ["--agent", "codex", "--model", "openai/gpt-5", "--base-url", f"{server.url}/v1", "--network", "host"]
        args += ["--keep-worktrees"]
        result = cli(
            ["eval", "--suite", str(suite), "--trust", "--format", "json", "-q", "--runtime", runtime, *args], cwd=repo
        )
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    (attempt,) = envelope["report"]["tasks"][0]["attempts"]
    assert attempt["outcome"] == "pass", attempt
    assert attempt["tokens"] == served.tokens.model_dump()  # parsed from its session files, as on the host
    assert attempt["turns"] == 2
    assert list(envelope["environment_images"]) == ["hello"]
    where = (Path(attempt["worktree"]) / "notes" / "where.txt").read_text().split()
    assert where[0] in ("/run/.containerenv", "/.dockerenv")  # its tool ran inside the container
    assert where[1] != "0" and where[2] == "/app"  # as a non-root user, in the worktree at the documented path
