"""Harbor semantics in real containers, on small task directories built here (busybox base image, offline): one
container per attempt with the verifier in it (a service and a package the agent left are what the tests check),
`separate` and `--verifier-room fresh`, `/solution` for the oracle only, the image's own WORKDIR, a healthcheck
before the agent, artifacts collected into the run store, and Harbor's rule that the reward decides however the
agent ended (a timed-out agent is graded, and every process it left inside is ended first)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.test_containers import (
    BASE_IMAGE,
    _attempts,
    _eval,
    runtime,  # noqa: F401  (the fixture that builds the base image)
    workspace,  # noqa: F401
)

pytestmark = [pytest.mark.container, pytest.mark.slow]

REWARD = "if {check}; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"


def _task(
    root: Path,
    name: str,
    *,
    solve: str,
    check: str,
    toml: str = "",
    dockerfile: str = "",
    timeout: int = 60,
    mode: str = "shared",
) -> None:
    task = root / name
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True)
    (task / "instruction.md").write_text(f"Task {name}.\n")
    head = f'\n[agent]\ntimeout_sec = {timeout}\n[verifier]\ntimeout_sec = 60\nenvironment_mode = "{mode}"\n'
    (task / "task.toml").write_text('version = "1.0"\n' + textwrap.dedent(toml) + head)
    (task / "environment" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\n{textwrap.dedent(dockerfile)}")
    (task / "tests" / "test.sh").write_text(REWARD.format(check=check))
    (task / "solution" / "solve.sh").write_text(textwrap.dedent(solve))


@pytest.fixture
def harbor(tmp_path: Path) -> Path:
    root = tmp_path / "harbor"
    # The agent starts a service (busybox httpd, a daemon) and installs a program under /usr/local: a verifier in the
    # agent's own container (Harbor's default) sees both.
    _task(
        root,
        "service",
        solve="""\
            mkdir -p /srv/www /usr/local/bin && echo up > /srv/www/index.html
            httpd -p 127.0.0.1:8080 -h /srv/www
            printf '#!/bin/sh\\necho tool-ok\\n' > /usr/local/bin/tool && chmod 755 /usr/local/bin/tool
        """,
        check="wget -q -O - http://127.0.0.1:8080/ | grep -q up && /usr/local/bin/tool | grep -q tool-ok",
        toml="[environment]\nallow_internet = false\n",
    )
    # A verifier of its own: the agent's worktree, in a new container of the image.
    _task(
        root,
        "separate",
        solve="echo done > /app/out.txt; mkdir -p /usr/local/bin && echo x > /usr/local/bin/left\n",
        check="grep -q done /app/out.txt && ! test -e /usr/local/bin/left",
        toml='[verifier.env]\nMODE = "separate"\n[environment]\nallow_internet = false\n',
        mode="separate",
    )
    # The image's own WORKDIR (no [environment] workdir), seeded into the worktree; solution/ at /solution.
    _task(
        root,
        "workdir",
        solve="{ pwd; cat seed.txt; test -f /solution/solve.sh && echo solution-there; } > where.txt\n",
        check="grep -qx /srv/work /srv/work/where.txt && grep -qx seed /srv/work/where.txt "
        "&& grep -qx solution-there /srv/work/where.txt",
        toml="[environment]\nallow_internet = false\n",
        dockerfile="WORKDIR /srv/work\nRUN echo seed > /srv/work/seed.txt\n",
    )
    # A healthcheck that passes on its third run, before the agent starts.
    _task(
        root,
        "healthy",
        solve="cat /tmp/checks > /app/checks.txt\n",
        check='test "$(cat /app/checks.txt)" -ge 3',
        toml="""\
            [environment]
            allow_internet = false
            [environment.healthcheck]
            command = 'n=$(cat /tmp/checks 2>/dev/null || echo 0); n=$((n + 1)); echo $n > /tmp/checks; test $n -ge 3'
            interval_sec = 0.1
            start_interval_sec = 0.1
            retries = 5
        """,
    )
    _task(
        root,
        "unhealthy",
        solve="true\n",
        check="true",
        toml="[environment]\nallow_internet = false\n[environment.healthcheck]\ncommand = 'false'\n"
        "interval_sec = 0.1\nretries = 2\n",
    )
    # Artifacts the task declares are collected from the agent's container into the run store.
    _task(
        root,
        "artifacts",
        solve="mkdir -p /var/log/agent && echo did-it > /var/log/agent/run.log && echo ok > /app/ok.txt\n",
        check="test -f /app/ok.txt",
        toml='artifacts = [{source = "/var/log/agent", destination = "agent-logs"}]\n'
        "[environment]\nallow_internet = false\n",
    )
    return root


def _by_task(result: Any) -> dict[str, dict[str, Any]]:
    assert result.exit_code == 0, result.output
    return {task: runs[0] for task, runs in _attempts(json.loads(result.stdout)).items()}


def test_the_oracle_passes_where_harbor_s_does_and_the_record_says_where_it_verified(
    cli,
    runtime,  # noqa: F811
    workspace,  # noqa: F811
    harbor: Path,
) -> None:
    result = _eval(cli, workspace, harbor, runtime, "--agent", "oracle")
    attempts = _by_task(result)
    assert {task: a["outcome"] for task, a in attempts.items()} == {
        "artifacts": "pass",
        "healthy": "pass",
        "separate": "pass",
        "service": "pass",
        "unhealthy": "error",
        "workdir": "pass",
    }, {task: a.get("reason") for task, a in attempts.items()}
    assert attempts["unhealthy"]["error_category"] == "setup"
    assert "healthcheck failed 2 times in a row" in attempts["unhealthy"]["reason"]
    rooms = {task: a.get("verifier_room") for task, a in attempts.items()}
    assert rooms == {
        "artifacts": "shared",
        "healthy": "shared",
        "separate": "separate",
        "service": "shared",
        "unhealthy": None,
        "workdir": "shared",
    }
    envelope = json.loads(result.stdout)
    containment = envelope["run"]["sandbox"]
    assert containment["kind"] == "container" and containment["version"].startswith(runtime)
    assert containment["network"] == "off" and "root" in containment["uid"]
    run_dir = workspace / ".worktrial" / "runs" / envelope["run"]["id"]
    collected = run_dir / "collected" / "artifacts-1" / "agent-logs"
    assert (collected / "agent" / "run.log").read_text() == "did-it\n" or (collected / "run.log").read_text() == (
        "did-it\n"
    )


def test_worktrial_s_fresh_room_keeps_only_the_agent_s_files(
    cli,
    runtime,  # noqa: F811
    workspace,  # noqa: F811
    harbor: Path,
) -> None:
    result = _eval(cli, workspace, harbor / "service", runtime, "--agent", "oracle", "--verifier-room", "fresh")
    (attempt,) = _by_task(result).values()
    assert (attempt["outcome"], attempt["verifier_room"], attempt["reward"]) == ("fail", "fresh", 0.0)
    run = json.loads(
        (workspace / ".worktrial" / "runs" / json.loads(result.stdout)["run"]["id"] / "run.json").read_text()
    )
    assert run["config"]["verifier_room"] == "fresh"


def test_the_reward_decides_after_a_timeout_once_the_agent_s_processes_are_gone(
    cli,
    runtime,  # noqa: F811
    workspace,  # noqa: F811
    tmp_path: Path,
) -> None:
    root = tmp_path / "stubborn"
    _task(
        root,
        "stubborn",
        solve="true\n",
        check='grep -q hello /app/hello.txt && ! ps | grep -v grep | grep -q "sleep 1000"',
        toml="[environment]\nallow_internet = false\n",
        timeout=3,
    )
    agent = "echo hello > /app/hello.txt; trap '' TERM; sleep 1000 & sleep 1000"
    result = _eval(cli, workspace, root, runtime, "--agent-cmd", agent, "--grace-secs", "0.5")
    (attempt,) = _by_task(result).values()
    assert attempt["outcome"] == "pass", attempt  # graded as Harbor grades a timed-out agent: its reward decides
    assert attempt["claimed"] is None and attempt["reward"] == 1.0
    assert attempt["agent_ended"] == "killed"
