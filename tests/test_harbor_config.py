"""Every field of Harbor's task.toml schema: honoured (what it becomes in the suite) or refused (one line naming the
task and the field). The table below must name every field the models know, so a field added to the schema
without a decision fails here."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from worktrial.errors import SuiteError
from worktrial.model.commands import ShCommand
from worktrial.model.harbor_config import (
    EnvironmentTable,
    TaskConfig,
    resolve_templates,
    template_names,
)
from worktrial.model.run_config import TimeoutMultipliers
from worktrial.model.suite import Task, load_suite

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "harbor" / "hello-file"


def _task(tmp_path: Path, toml: str) -> Task:
    task_dir = tmp_path / "ds" / "t1"
    shutil.copytree(EXAMPLE, task_dir)
    (task_dir / "task.toml").write_text(toml)
    return load_suite(task_dir).suite.tasks[0]


def _refused(tmp_path: Path, toml: str) -> str:
    with pytest.raises(SuiteError) as info:
        _task(tmp_path, toml)
    message = str(info.value)
    assert "\n" not in message and message.startswith("task t1: ")
    return message


def _env(task: Task) -> Any:
    assert task.environment is not None
    return task.environment


# field -> (task.toml, what it becomes: a check on the task, or the words of its refusal)
HONOURED: dict[str, tuple[str, Any]] = {
    "schema_version": ('schema_version = "1.4"\n', lambda t: t.id == "t1"),
    "version": ('version = "1.0"\n', lambda t: t.id == "t1"),
    "source": ('source = "terminal-bench"\n', lambda t: t.id == "t1"),
    "metadata": ('[metadata]\ncategory = "games"\nanything = [1, 2]\n', lambda t: t.cluster == "games"),
    "task.name": ('[task]\nname = "org/t1"\n', lambda t: t.id == "t1"),
    "task.version": ('[task]\nname = "org/t1"\nversion = "2"\n', lambda t: t.id == "t1"),
    "task.description": ('[task]\nname = "org/t1"\ndescription = "d"\n', lambda t: t.id == "t1"),
    "task.authors": ('[task]\nname = "o/t"\n[[task.authors]]\nname = "a"\nemail = "a@b"\n', lambda t: t.id == "t1"),
    "task.keywords": ('[task]\nname = "o/t"\nkeywords = ["x"]\n', lambda t: t.id == "t1"),
    "agent.timeout_sec": ("[agent]\ntimeout_sec = 90.4\n", lambda t: t.timeout_secs == 90),
    "agent.user": ('[agent]\nuser = "app"\n', lambda t: _env(t).user == "app"),
    "agent.network_mode": ('[agent]\nnetwork_mode = "no-network"\n', lambda t: _env(t).network == "off"),
    "verifier.timeout_sec": ("[verifier]\ntimeout_sec = 30\n", lambda t: t.verify_timeout_secs == 30),
    "verifier.env": ('[verifier.env]\nMODE = "strict"\n', lambda t: _env(t).harbor.verifier_env == {"MODE": "strict"}),
    "verifier.user": (
        '[agent]\nuser = "1000"\n[verifier]\nuser = "root"\n',
        lambda t: _env(t).user == "1000" and _env(t).harbor.verifier_user == "root",
    ),
    "verifier.environment_mode": (
        '[verifier]\nenvironment_mode = "separate"\n',
        lambda t: _env(t).harbor.verifier_mode == "separate" and _env(t).harbor.verifier_mode_declared,
    ),
    "verifier.network_mode": (
        '[verifier]\nnetwork_mode = "no-network"\n',
        lambda t: _env(t).network == "on" and _env(t).harbor.verifier_network == "no-network",
    ),
    "environment.build_timeout_sec": (
        "[environment]\nbuild_timeout_sec = 77\n",
        lambda t: _env(t).build_timeout_secs == 77,
    ),
    "environment.docker_image": (
        '[environment]\ndocker_image = "registry.example/img:1"\n',
        lambda t: _env(t).image == "registry.example/img:1" and _env(t).dockerfile is not None,
    ),
    "environment.os": ('[environment]\nos = "Linux"\n', lambda t: t.id == "t1"),
    "environment.cpus": ("[environment]\ncpus = 2\n", lambda t: _env(t).cpus == 2.0),
    "environment.memory_mb": ("[environment]\nmemory_mb = 512\n", lambda t: _env(t).memory_mb == 512),
    "environment.memory": ('[environment]\nmemory = "2G"\n', lambda t: _env(t).memory_mb == 2048),
    "environment.storage_mb": ("[environment]\nstorage_mb = 10240\n", lambda t: _env(t).harbor.storage_mb == 10240),
    "environment.storage": ('[environment]\nstorage = "10G"\n', lambda t: _env(t).harbor.storage_mb == 10240),
    "environment.gpus": ("[environment]\ngpus = 0\n", lambda t: t.id == "t1"),
    "environment.mcp_servers": ("[environment]\nmcp_servers = []\n", lambda t: t.id == "t1"),
    "environment.env": (
        '[environment.env]\nA = "${HOME_VAR:-x}"\n',
        lambda t: _env(t).harbor.env == {"A": "${HOME_VAR:-x}"},
    ),
    "environment.workdir": (
        '[environment]\nworkdir = "/srv/w"\n',
        lambda t: _env(t).workdir == "/srv/w" and not _env(t).harbor.workdir_from_image,
    ),
    "environment.allow_internet": ("[environment]\nallow_internet = false\n", lambda t: _env(t).network == "off"),
    "environment.network_mode": ('[environment]\nnetwork_mode = "no-network"\n', lambda t: _env(t).network == "off"),
    "solution.env": (
        '[solution.env]\nLEVEL = "2"\nKEY = "${SECRET:-none}"\n',
        lambda t: _env(t).harbor.solution_env == {"LEVEL": "2", "KEY": "${SECRET:-none}"},
    ),
    "artifacts": (
        'artifacts = ["/app/out.log", {source = "/var/log", destination = "logs", exclude = ["*.gz"]}]\n',
        lambda t: (
            [(a.source, a.destination) for a in _env(t).harbor.artifacts]
            == [("/app/out.log", None), ("/var/log", "logs")]
        ),
    ),
    "environment.healthcheck": (
        '[environment.healthcheck]\ncommand = "test -f /ready"\nretries = 2\n',
        lambda t: _env(t).harbor.healthcheck.command == "test -f /ready" and _env(t).harbor.healthcheck.retries == 2,
    ),
    "steps": ("", lambda t: t.id == "t1"),  # none: a single-step task
}

REFUSED: dict[str, tuple[str, str]] = {
    "agent.allowed_hosts": (
        '[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n',
        "[environment] allowed_hosts",
    ),
    "environment.allowed_hosts": ('[environment]\nnetwork_mode = "allowlist"\n', "[environment] allowed_hosts"),
    "agent.network_mode (allowlist)": ('[agent]\nnetwork_mode = "allowlist"\n', "[agent] allowed_hosts"),
    "verifier.allowed_hosts": ('[verifier]\nallowed_hosts = ["pypi.org"]\n', "[verifier] allowed_hosts"),
    "verifier.environment": ('[verifier.environment]\ndocker_image = "x"\n', "[verifier.environment]"),
    "verifier.collect": ('[[verifier.collect]]\ncommand = "true"\n', "[[verifier.collect]]"),
    "environment.os": ('[environment]\nos = "windows"\n', "[environment] os"),
    "environment.gpus": ("[environment]\ngpus = 1\n", "[environment] gpus"),
    "environment.gpu_types": ('[environment]\ngpu_types = ["H100"]\n', "[environment] gpus"),
    "environment.tpu": ('[environment.tpu]\ntype = "v6e"\ntopology = "2x4"\n', "[environment] tpu"),
    "environment.mcp_servers": (
        '[[environment.mcp_servers]]\nname = "m"\nurl = "http://127.0.0.1:1/sse"\n',
        "[environment] mcp_servers",
    ),
    "environment.skills_dir": ('[environment]\nskills_dir = "/skills"\n', "[environment] skills_dir"),
    "environment.env (reserved)": ('[environment.env]\nPATH = "/x"\n', "[environment] env"),
    "environment.workdir (relative)": ('[environment]\nworkdir = "app"\n', "[environment] workdir"),
    "environment.memory (bad size)": ('[environment]\nmemory = "lots"\n', "[environment] memory"),
    "steps": ('[[steps]]\nname = "one"\n', "[[steps]]"),
    "multi_step_reward_strategy": ('multi_step_reward_strategy = "mean"\n', "multi_step_reward_strategy"),
    "artifacts (relative source)": ('artifacts = ["out.log"]\n', "field artifacts"),
    "artifacts (escaping destination)": (
        'artifacts = [{source = "/app", destination = "../up"}]\n',
        "field artifacts",
    ),
    "artifacts (a compose service)": ('artifacts = [{source = "/x", service = "db"}]\n', "field artifacts"),
    "solution.env (reserved)": ('[solution.env]\nHOME = "/x"\n', "[solution] env"),
    "unknown field": ("[environment]\ncpu = 2\n", "field [environment] cpu is not in Harbor's task schema"),
    "unknown table": ("[verifer]\ntimeout_sec = 1\n", "field verifer is not in Harbor's task schema"),
    "wrong type": ('[agent]\ntimeout_sec = "long"\n', "field [agent] timeout_sec:"),
}


def _fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    names = set()
    for name in model.model_fields:
        names.add(prefix + name)
    return names


def test_the_tables_decide_every_field_of_the_schema() -> None:
    known = _fields(TaskConfig)
    known |= {f"{table}.{f}" for table in ("agent", "verifier", "solution") for f in _table_fields(table)}
    known |= {f"environment.{f}" for f in EnvironmentTable.model_fields}
    known |= {f"task.{f}" for f in ("name", "version", "description", "authors", "keywords")}
    decided = set(HONOURED) | {name.split(" (")[0] for name in REFUSED}
    tables = {"agent", "verifier", "environment", "solution", "task"}
    assert known - tables <= decided, sorted(known - tables - decided)


def _table_fields(table: str) -> list[str]:
    return list(TaskConfig.model_fields[table].annotation.model_fields)  # type: ignore[union-attr]


@pytest.mark.parametrize("field", sorted(HONOURED))
def test_honoured_fields(tmp_path: Path, field: str) -> None:
    toml, check = HONOURED[field]
    assert check(_task(tmp_path, toml)), field


@pytest.mark.parametrize("field", sorted(REFUSED))
def test_refused_fields_are_one_line_naming_task_and_field(tmp_path: Path, field: str) -> None:
    toml, words = REFUSED[field]
    assert words in _refused(tmp_path, toml)


def test_terminal_bench_2_s_own_task_toml_loads(tmp_path: Path) -> None:
    """The shape of a TB 2.0 task.toml (older spellings) and of its registry's newer ones."""
    old = (
        'version = "1.0"\n[metadata]\nauthor_name = "a"\ndifficulty = "easy"\ncategory = "software-engineering"\n'
        'tags = ["git"]\nexpert_time_estimate_min = 5.0\n[verifier]\ntimeout_sec = 900.0\n'
        "[agent]\ntimeout_sec = 900.0\n"
        '[environment]\nbuild_timeout_sec = 600.0\ndocker_image = "alexgshaw/fix-git:20251031"\ncpus = 1\n'
        'memory = "2G"\nstorage = "10G"\n'
    )
    env = _env(_task(tmp_path, old))
    assert (env.image, env.memory_mb, env.harbor.storage_mb, env.network) == (
        "alexgshaw/fix-git:20251031",
        2048,
        10240,
        "on",
    )
    new = (
        'schema_version = "1.1"\nartifacts = []\n[task]\nname = "terminal-bench/t1"\nkeywords = ["bash"]\n'
        '[[task.authors]]\nname = "A"\nemail = "a@b"\n[metadata]\ncategory = "x"\n[verifier]\ntimeout_sec = 900.0\n'
        '[agent]\ntimeout_sec = 900.0\n[environment]\nbuild_timeout_sec = 600.0\ndocker_image = "a/b:1"\ncpus = 1\n'
        "memory_mb = 2048\nstorage_mb = 10240\ngpus = 0\nallow_internet = true\nmcp_servers = []\n"
        "[verifier.env]\n\n[environment.env]\n\n[solution.env]\n"
    )
    shutil.rmtree(tmp_path / "ds")
    assert _env(_task(tmp_path, new)).image == "a/b:1"


def test_a_solution_runs_from_slash_solution(tmp_path: Path) -> None:
    task = _task(tmp_path, '[solution.env]\nB = "two words"\nA = "1"\n')
    assert task.solution is not None
    (command,) = task.solution
    assert isinstance(command, ShCommand)
    assert "/solution/" in command.sh and command.sh.endswith('bash "$dir/solve.sh"')
    assert "two words" not in command.sh  # its variables are the container's to give, by name


def test_env_templates_resolve_from_the_host_or_say_which_variable() -> None:
    values = {"A": "${X}", "B": "pre-${Y:-dflt}", "C": "plain"}
    assert template_names(values) == ["X", "Y"]
    assert resolve_templates(values, {"X": "1"}, "t", "[environment] env") == {"A": "1", "B": "pre-dflt", "C": "plain"}
    with pytest.raises(SuiteError, match=r"task t: \[environment\] env needs \$\{X\}"):
        resolve_templates(values, {}, "t", "[environment] env")


def test_timeout_multipliers_scale_each_phase(tmp_path: Path) -> None:
    task_dir = tmp_path / "ds" / "t1"
    shutil.copytree(EXAMPLE, task_dir)
    loaded = load_suite(task_dir)
    scaled = TimeoutMultipliers(all=2.0, verifier=0.5).apply(loaded)
    (before,), (after,) = loaded.suite.tasks, scaled.suite.tasks
    assert (after.timeout_secs, after.verify_timeout_secs) == (before.timeout_secs * 2, before.verify_timeout_secs // 2)
    assert _env(after).build_timeout_secs == _env(before).build_timeout_secs * 2
    assert scaled.sha256 == loaded.sha256 and scaled.digest == loaded.digest
    assert TimeoutMultipliers().apply(loaded) is loaded and TimeoutMultipliers().neutral
    assert not TimeoutMultipliers(agent=3).neutral
