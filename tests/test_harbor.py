"""Harbor task directories read as a suite (no container runtime needed): the mapping, the digest, bad input, and
how a reward file is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from worktrial.engine.containers import Reward, read_reward
from worktrial.errors import SuiteError
from worktrial.model.commands import ShCommand
from worktrial.model.suite import load_suite

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "harbor"


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    out = tmp_path / "dataset"
    shutil.copytree(EXAMPLES, out, ignore=shutil.ignore_patterns("build-base-image.sh", "README.md"))
    return out


def test_a_dataset_maps_every_task(dataset: Path) -> None:
    loaded = load_suite(dataset)
    tasks = {t.id: t for t in loaded.suite.tasks}
    assert sorted(tasks) == ["count-words", "fix-sum", "hello-file"]
    hello = tasks["hello-file"]
    assert hello.prompt == (dataset / "hello-file" / "instruction.md").read_text()
    assert (hello.category, hello.timeout_secs, hello.verify_timeout_secs) == ("capability", 120, 60)
    assert hello.cluster == "file-operations"
    env = hello.environment
    assert env is not None and env.container
    assert env.dockerfile == "dataset/hello-file/environment/Dockerfile"
    assert (env.network, env.cpus, env.memory_mb, env.user, env.workdir) == ("off", 1.0, 256, "image", "/app")
    assert env.harbor is not None and env.harbor.workdir_from_image and env.harbor.verifier_mode == "shared"
    assert env.verifier_tests == "dataset/hello-file/tests"
    assert hello.solution is not None
    solution = hello.solution[0]
    assert isinstance(solution, ShCommand)
    assert 'cp -R "$WORKTRIAL_SUITE_DIR"/dataset/hello-file/solution/. /solution/' in solution.sh
    assert solution.sh.endswith('bash "$dir/solve.sh"')
    assert [str(c) for c in hello.verify_commands] == ["bash /tests/test.sh"]


def test_one_task_directory_is_a_suite_of_one(dataset: Path) -> None:
    loaded = load_suite(dataset / "fix-sum")
    assert [t.id for t in loaded.suite.tasks] == ["fix-sum"]
    assert loaded.suite.tasks[0].environment is not None
    assert loaded.suite.tasks[0].environment.context == "fix-sum/environment"


def test_the_bundle_digest_covers_every_file_of_every_task(dataset: Path) -> None:
    loaded = load_suite(dataset)
    names = {f.name for f in loaded.files}
    assert "dataset/count-words/tests/expected.txt" in names
    assert "dataset/fix-sum/environment/sum.sh" in names
    before = loaded.digest
    (dataset / "count-words" / "tests" / "expected.txt").write_text("10\n")
    assert load_suite(dataset).digest != before
    assert load_suite(dataset).sha256 == loaded.sha256  # the prompt, limits and commands did not change


def test_memory_in_harbor_s_older_spelling(dataset: Path) -> None:
    toml = dataset / "hello-file" / "task.toml"
    toml.write_text(toml.read_text().replace("memory_mb = 256", 'memory = "2G"'))
    env = load_suite(dataset).suite.tasks[2].environment
    assert env is not None and env.memory_mb == 2048


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: (d / "task.toml").write_text("[agent\ntimeout_sec = 1"), "task.toml: invalid TOML"),
        (lambda d: (d / "task.toml").write_text("[agent]\ntimeout_sec = -5\n"), "field [agent] timeout_sec:"),
        (lambda d: (d / "environment" / "Dockerfile").unlink(), "Dockerfile: missing"),
        (lambda d: (d / "environment" / "docker-compose.yaml").write_text("services: {}\n"), "compose"),
        (lambda d: (d / "tests" / "test.sh").unlink(), "test.sh: missing"),
    ],
)
def test_bad_task_directories_are_one_line(dataset: Path, change, expected: str) -> None:
    change(dataset / "hello-file")
    with pytest.raises(SuiteError) as info:
        load_suite(dataset)
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_a_directory_without_tasks_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="no Harbor task in it"):
        load_suite(tmp_path)


@pytest.mark.parametrize(
    ("name", "body", "reward", "rewards", "problem"),
    [
        ("reward.txt", "1\n", 1.0, None, None),
        ("reward.txt", "0.5", 0.5, None, None),
        ("reward.json", '{"reward": 1}', 1.0, None, None),
        ("reward.json", '{"reward": 1, "style": 0.25}', 1.0, {"reward": 1.0, "style": 0.25}, None),
        ("reward.json", '{"a": 1, "b": 0}', 0.0, {"a": 1.0, "b": 0.0}, None),
        ("reward.json", '{"a": 1, "b": 1}', 1.0, {"a": 1.0, "b": 1.0}, None),
        ("reward.json", "{}", None, None, "no key"),
        ("reward.json", '{"a": 1, "b": "x"}', None, None, "does not hold a number"),
        ("reward.txt", "yes", None, None, "not a number"),
        ("reward.json", '{"reward": true}', None, None, "does not hold a number"),
    ],
)
def test_reward_files(
    tmp_path: Path, name: str, body: str, reward: float | None, rewards: dict[str, float] | None, problem: str | None
) -> None:
    (tmp_path / name).write_text(body)
    found = read_reward(tmp_path)
    assert (found.value, found.rewards) == (reward, rewards)
    assert (found.problem is None) if problem is None else (found.problem is not None and problem in found.problem)


def test_no_reward_file_and_a_symlinked_one_are_no_reward(tmp_path: Path) -> None:
    assert read_reward(tmp_path) == Reward(
        None, problem="the verifier wrote no reward (/logs/verifier/reward.txt or reward.json)"
    )
    (tmp_path / "elsewhere").write_text("1")
    (tmp_path / "reward.txt").symlink_to(tmp_path / "elsewhere")
    found = read_reward(tmp_path)
    assert found.value is None and found.problem is not None


def test_existing_suites_keep_their_environment_rules(tmp_path: Path) -> None:
    suite = tmp_path / "s.json"
    base = {"id": "s", "tasks": [{"id": "t", "prompt": "p", "verify_commands": ["true"]}]}
    for environment, problem in [
        ({}, 'needs "setup" commands'),
        ({"image": "x", "setup": ["true"]}, "put the setup steps in the Dockerfile"),
    ]:
        suite.write_text(json.dumps({**base, "environment": environment}))
        with pytest.raises(SuiteError, match=problem):
            load_suite(suite)
    suite.write_text(json.dumps({**base, "environment": {"setup": ["true"]}}))
    env = load_suite(suite).suite.environment
    assert env is not None and not env.container
