"""Harbor task directories in real containers (Podman or Docker on a base image built offline from busybox-static,
`make containers`): the oracle passes, nop fails, a command agent runs inside and sees neither the host nor the
tests, the reward file decides, the envelope pins the image, resume continues, bad input is one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git

pytestmark = [pytest.mark.container, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "harbor"
BASE_IMAGE = "localhost/worktrial-base:busybox"


def _runtime() -> str | None:
    return next((name for name in ("podman", "docker") if shutil.which(name)), None)


@pytest.fixture(scope="module")
def runtime() -> str:
    name = _runtime()
    if name is None:
        pytest.skip("needs podman or docker (make containers installs podman)")
    built = subprocess.run(
        [str(EXAMPLES / "build-base-image.sh"), name, BASE_IMAGE], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        pytest.skip(f"the base image could not be built: {built.stderr.strip()[-200:]}")
    return name


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """Harbor tasks keep their files in the image: the workspace is an empty repository."""
    path = tmp_path / "ws"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "empty")
    return path


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    out = tmp_path / "dataset"
    shutil.copytree(EXAMPLES, out, ignore=shutil.ignore_patterns("build-base-image.sh", "README.md"))
    return out


def _eval(cli, workspace: Path, suite: Path, runtime: str, *args: str):
    return cli(
        ["eval", "--suite", str(suite), "--trust", "--format", "json", "--runtime", runtime, "--quiet", *args],
        cwd=workspace,
    )


def _attempts(envelope: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {t["task_id"]: t["attempts"] for t in envelope["report"]["tasks"]}


def _image_id(runtime: str, image: str) -> str:
    out = subprocess.run([runtime, "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True)
    return out.stdout.strip() if out.stdout.strip().startswith("sha256:") else f"sha256:{out.stdout.strip()}"


def test_oracle_passes_nop_fails_and_the_envelope_pins_each_image(cli, runtime, workspace, dataset) -> None:
    # docs/environments.md shows this run (tests/test_docs.py, RUN_ELSEWHERE)
    args = ["--suite", str(dataset), "--agent", "oracle", "--trust", "--workspace", str(workspace)]
    oracle = cli(["eval", *args, "--runtime", runtime, "--format", "json", "--quiet"])
    assert oracle.exit_code == 0, oracle.output
    envelope = json.loads(oracle.stdout)
    attempts = _attempts(envelope)
    assert {task: [a["outcome"] for a in runs] for task, runs in attempts.items()} == {
        "count-words": ["pass"],
        "fix-sum": ["pass"],
        "hello-file": ["pass"],
    }
    assert all(a["reward"] == 1.0 for runs in attempts.values() for a in runs)
    images = envelope["environment_images"]
    assert sorted(images) == ["count-words", "fix-sum", "hello-file"]
    assert all(digest.startswith("sha256:") and len(digest) == 71 for digest in images.values())
    # The pinned id is the id the runtime knows the built image by (tagged by its inputs' digest).
    tags = subprocess.run(
        [runtime, "images", "--format", "{{.Repository}}:{{.Tag}}", "localhost/worktrial-env"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert set(images.values()) <= {_image_id(runtime, tag) for tag in tags}

    nop = _eval(cli, workspace, dataset, runtime, "--agent", "nop")
    assert nop.exit_code == 0, nop.output
    nop_attempts = _attempts(json.loads(nop.stdout))
    assert {a["outcome"] for runs in nop_attempts.values() for a in runs} == {"fail"}
    assert {a["reward"] for runs in nop_attempts.values() for a in runs} == {0.0}


def test_a_command_agent_runs_inside_and_sees_neither_the_host_nor_the_tests(
    cli, runtime, workspace, dataset, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("do not read\n")
    probe = (
        f'{{ pwd; id -u; test -n "$(ls -A /tests; ls -A /logs/verifier)" && echo tests-visible; '
        f"test -e {secret} && echo host-visible; "
        f"test -e {dataset} && echo suite-visible; cat /app/words.txt | wc -w; }} > /app/probe.txt; "
        "ls /sys/class/net > /app/net.txt; "
        "wc -w < /app/words.txt | tr -d ' ' > /app/count.txt"
    )
    result = _eval(cli, workspace, dataset / "count-words", runtime, "--agent-cmd", probe, "--keep-worktrees")
    assert result.exit_code == 0, result.output
    (attempt,) = _attempts(json.loads(result.stdout))["count-words"]
    assert attempt["outcome"] == "pass", attempt
    seen = (Path(attempt["worktree"]) / "probe.txt").read_text().split()
    assert seen[0] == "/app"  # its current directory is the worktree, at the documented path
    assert "tests-visible" not in seen and "host-visible" not in seen and "suite-visible" not in seen
    assert seen[-1] == "9"  # and the image's own files were there
    assert (Path(attempt["worktree"]) / "net.txt").read_text().split() == ["lo"]  # allow_internet = false


def test_a_suite_s_dockerfile_runs_as_a_non_root_user_on_the_repository(cli, runtime, repo, tmp_path: Path) -> None:
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nRUN echo built > /built.txt\n")
    suite = tmp_path / "suite.json"
    verify = 'test "$(id -u)" != 0 && test "$(cat done.txt)" = "$(cat /built.txt)" && test -f README.md'
    suite.write_text(
        json.dumps(
            {
                "id": "native",
                "environment": {"dockerfile": "env/Dockerfile", "workdir": "/work"},
                "tasks": [
                    {
                        "id": "t",
                        "prompt": "p",
                        "verify_commands": [{"sh": verify}],
                        "solution": [{"sh": "cat /built.txt > done.txt"}],
                    }
                ],
            }
        )
    )
    result = _eval(cli, repo, suite, runtime, "--agent", "oracle")
    assert result.exit_code == 0, result.output
    envelope = json.loads(result.stdout)
    assert [a["outcome"] for a in _attempts(envelope)["t"]] == ["pass"]
    assert list(envelope["environment_images"]) == ["t"]


def test_the_reward_file_decides_not_the_exit_status(cli, runtime, workspace, dataset) -> None:
    task = dataset / "hello-file"
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\nexit 3\n")
    passed = _eval(cli, workspace, task, runtime, "--agent", "nop")
    (attempt,) = _attempts(json.loads(passed.stdout))["hello-file"]
    assert (attempt["outcome"], attempt["reward"]) == ("pass", 1.0)

    (task / "tests" / "test.sh").write_text("echo 0.5 > /logs/verifier/reward.txt\n")
    failed = _eval(cli, workspace, task, runtime, "--agent", "oracle")
    (attempt,) = _attempts(json.loads(failed.stdout))["hello-file"]
    assert (attempt["outcome"], attempt["reward"]) == ("fail", 0.5)
    assert "reward is 0.5, not 1" in attempt["reason"]


def test_resume_runs_what_is_missing_in_the_same_image(cli, runtime, workspace, dataset) -> None:
    first = _eval(cli, workspace, dataset / "fix-sum", runtime, "--agent", "oracle", "--attempts", "2")
    envelope = json.loads(first.stdout)
    run_dir = workspace / ".worktrial" / "runs" / envelope["run"]["id"]
    lines = (run_dir / "attempts.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "attempts.jsonl").write_text("".join(lines[:-1]))
    (run_dir / "envelope.json").unlink()
    resumed = cli(["resume", envelope["run"]["id"], "--format", "json", "--runtime", runtime], cwd=workspace)
    assert resumed.exit_code == 0, resumed.output
    again = json.loads(resumed.stdout)
    assert [a["outcome"] for a in _attempts(again)["fix-sum"]] == ["pass", "pass"]
    assert again["environment_images"] == envelope["environment_images"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: (d / "task.toml").write_text("[verifier]\ntimeout_sec = 'soon'\n"),
            "field [verifier] timeout_sec: Input should be a valid number",
        ),
        (lambda d: (d / "environment" / "Dockerfile").unlink(), "environment/Dockerfile: missing"),
        (lambda d: (d / "environment" / "Dockerfile").write_text("FROM localhost/worktrial-none:x\n"), "build failed"),
    ],
)
def test_bad_tasks_are_one_line_and_exit_2(cli, runtime, workspace, dataset, change, expected: str) -> None:
    change(dataset / "hello-file")
    result = _eval(cli, workspace, dataset / "hello-file", runtime, "--agent", "oracle")
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_check_passes_on_the_example_dataset(cli, runtime, workspace, dataset) -> None:
    result = cli(["check", str(dataset), "--trust", "--repeats", "2", "--runtime", runtime], cwd=workspace)
    assert result.exit_code == 0, result.output
    assert "No problems found" in result.stdout
    # Its progress: each phase named, the container tasks' re-runs (runs of the oracle) counted with the ETA.
    phases = [line for line in result.stderr.splitlines() if line.startswith("worktrial: check ")]
    assert phases == [
        "worktrial: check 1/3: running the oracle agent on 3 tasks",
        "worktrial: check 2/3: running the nop agent on 3 tasks",
        "worktrial: check 3/3: running the oracle agent on 3 tasks, 2 times each",
    ]
    reruns = result.stderr.split(phases[2])[1].splitlines()
    counted = [line for line in reruns if re.match(r"\[\d/6\] +pass ", line)]
    assert len(counted) == 6 and all(" · ETA ~" in line for line in counted[:-1])


def test_init_container_writes_a_suite_check_passes(cli, runtime, repo) -> None:
    written = cli(["init", "--container", "--base-image", BASE_IMAGE], cwd=repo)
    assert written.exit_code == 0, written.output
    assert f"container (FROM {BASE_IMAGE})" in written.stdout
    assert (repo / "evals" / "Dockerfile").read_text().splitlines()[2] == f"FROM {BASE_IMAGE}"
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "suite")
    result = cli(["check", "evals/suite.json", "--trust", "--repeats", "1", "--runtime", runtime, "--quiet"], cwd=repo)
    assert result.exit_code == 0, result.output
    assert "No problems found" in result.stdout
    # The regression task's bug is in the image, not planted per attempt: the do-nothing agent's patch is empty.
    nop = _eval(cli, repo, repo / "evals" / "suite.json", runtime, "--agent", "nop")
    run_dir = repo / ".worktrial" / "runs" / json.loads(nop.stdout)["run"]["id"]
    patches = {p.parent.parent.name: json.loads(p.read_text())["patch"] for p in run_dir.rglob("artifacts.json")}
    assert sorted(patches) == ["add-slugify", "fix-version-compare"]
    assert all(patch["files"] == [] and patch["diff"] == "" for patch in patches.values()), patches

    # Planted per attempt again, as the starter once did: check says so on the container path as on the host's.
    suite = json.loads((repo / "evals" / "suite.json").read_text())
    plant = {"sh": 'cat "$WORKTRIAL_SUITE_DIR/planted/worktrial_version.sh" > worktrial_version.sh'}
    suite["tasks"][1]["setup_commands"] = [plant]
    (repo / "evals" / "suite.json").write_text(json.dumps(suite))
    args = ["check", "evals/suite.json", "--trust", "--repeats", "1", "--runtime", runtime, "--quiet"]
    flagged = cli([*args, "--format", "json"], cwd=repo)
    assert flagged.exit_code == 1, flagged.output
    problems = {t["task_id"]: t["problems"] for t in json.loads(flagged.stdout)["tasks"]}
    assert any(
        "setup_commands leave the tree dirty (worktrial_version.sh)" in p for p in problems["fix-version-compare"]
    )
    assert "into the image (its Dockerfile)" in problems["fix-version-compare"][0]


def test_removing_an_attempt_s_container_ends_a_process_whose_client_was_killed(runtime, tmp_path: Path) -> None:
    """A killed `exec` client leaves its process running in the container: removing the attempt's container (after
    the agent, before a verifier of its own, and at cleanup) ends it with everything else in there."""
    from worktrial.isolation.attempt_container import AttemptContainer, Mounts
    from worktrial.isolation.container import ContainerEnv, ContainerPlan, find_runtime, probe

    rt = probe(find_runtime(runtime), BASE_IMAGE)
    worktree, scratch = tmp_path / "wt", tmp_path / "scratch"
    worktree.mkdir()
    scratch.mkdir()
    box = AttemptContainer(
        ContainerPlan(rt), ContainerEnv(image=BASE_IMAGE, digest=""), Mounts(worktree, (), (), scratch), network="off"
    )
    wrapped = box.wrap(["/bin/sh", "-c", "touch /app/started; while :; do sleep 0.1; done"], worktree, {})
    client = subprocess.Popen(wrapped.argv, env=wrapped.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    def running() -> bool:
        out = subprocess.run([runtime, "ps", "-q", "--filter", f"name={box.name}"], capture_output=True, text=True)
        return bool(out.stdout.strip())

    try:
        for _ in range(600):  # the process is up once it has touched its file
            if (worktree / "started").exists():
                break
            client.poll()
            subprocess.run(["sleep", "0.1"], check=True)
        assert (worktree / "started").exists()
        client.kill()
        client.wait()
        assert running()  # the client is gone, its container (and the process in it) is not
        box.remove()
        assert not running()
        assert not box.running
    finally:
        subprocess.run([runtime, "rm", "--force", box.name], capture_output=True)


def test_audit_checks_the_pinned_images_and_rewards(cli, runtime, workspace, dataset, tmp_path: Path) -> None:
    task = dataset / "hello-file"
    result = _eval(cli, workspace, task, runtime, "--agent", "oracle")
    envelope = json.loads(result.stdout)
    run_dir = workspace / ".worktrial" / "runs" / envelope["run"]["id"]
    audited = cli(["audit", str(run_dir / "envelope.json"), "--suite", str(task)], cwd=workspace)
    assert audited.exit_code == 0, audited.output
    report = cli(["report", envelope["run"]["id"], "--format", "markdown"], cwd=workspace)
    assert "- containers: 1 task(s) ran in container images instead of the sandbox: hello-file sha256:" in report.stdout

    envelope["environment_images"] = {}
    envelope["report"]["tasks"][0]["attempts"][0]["reward"] = 0.0
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(envelope))
    audited = cli(["audit", str(edited), "--suite", str(task), "--no-traces"], cwd=workspace)
    assert audited.exit_code == 1
    assert "task hello-file has a container environment but the envelope pins no image" in audited.stdout
    assert "reward 0 but verified=True" in audited.stdout


def test_variables_reach_the_container_by_name_never_on_its_command_line(runtime, tmp_path: Path) -> None:
    from worktrial.isolation.attempt_container import AttemptContainer, Mounts
    from worktrial.isolation.container import ContainerEnv, ContainerPlan, find_runtime, probe

    rt = probe(find_runtime(runtime), BASE_IMAGE)
    worktree, scratch = tmp_path / "wt", tmp_path / "scratch"
    worktree.mkdir()
    scratch.mkdir()
    mounts = Mounts(worktree, (), (), scratch)
    boxes = [AttemptContainer(ContainerPlan(rt), ContainerEnv(image=BASE_IMAGE, digest=""), mounts, network="off")]
    boxes.append(AttemptContainer(ContainerPlan(rt), ContainerEnv(image=BASE_IMAGE, digest=""), mounts, network="off"))
    home = scratch / "home"
    home.mkdir()
    env = {"API_TOKEN": "s3cret-value", "HOME": str(home), "PATH": "/nowhere", "WHERE": str(worktree / "sub")}
    script = 'echo "$API_TOKEN"; echo "$HOME"; echo "$TMPDIR"; echo "$PATH"; echo "$WHERE"; pwd'
    try:
        for box, last in zip(boxes, (False, True), strict=True):  # an exec into a started container; its own one
            wrapped = box.wrap(["/bin/sh", "-c", script], worktree, env, last=last)
            assert not any("s3cret" in arg for arg in wrapped.argv)
            out = subprocess.run(wrapped.argv, env=wrapped.env, capture_output=True, text=True, check=True)
            assert out.stdout.splitlines() == ["s3cret-value", str(home), "/tmp", "/bin", "/app/sub", "/app"]
            assert wrapped.argv[1] == ("run" if last else "exec")
    finally:
        subprocess.run([runtime, "rm", "--force", *(b.name for b in boxes)], capture_output=True)


def test_the_oracle_runs_solve_sh_beside_the_rest_of_its_solution(cli, runtime, workspace, dataset) -> None:
    solution = dataset / "hello-file" / "solution"
    (solution / "answer.txt").write_text("Hello, world!\n")
    (solution / "solve.sh").write_text('#!/bin/bash\ncp "$(dirname "$0")/answer.txt" /app/hello.txt\n')
    result = _eval(cli, workspace, dataset / "hello-file", runtime, "--agent", "oracle")
    (attempt,) = _attempts(json.loads(result.stdout))["hello-file"]
    assert (attempt["outcome"], attempt["reward"]) == ("pass", 1.0)


def test_containers_of_a_killed_harness_are_removed_by_the_next_run(runtime, tmp_path: Path) -> None:
    """A harness killed with ``kill -9`` cannot remove its attempts' containers; each carries the harness's pid and
    start time, and the next run on the same runtime removes those whose harness is gone (never a live one's, nor
    one of another PID namespace, whose pids this one cannot judge: a Ray node's sharing this machine's runtime)."""
    from worktrial.isolation.container import (
        HARNESS_LABEL,
        HARNESS_NS_LABEL,
        find_runtime,
        harness_id,
        pid_namespace,
        probe,
        sweep_orphans,
    )

    rt = probe(find_runtime(runtime), BASE_IMAGE)
    dead = subprocess.Popen(["true"])
    dead.wait()
    names = {key: f"worktrial-test-{key}-{os.getpid()}" for key in ("dead", "alive", "elsewhere")}
    owners = {"dead": f"{dead.pid}-1", "alive": harness_id(), "elsewhere": f"{dead.pid}-1"}
    namespaces = {"dead": pid_namespace(), "alive": pid_namespace(), "elsewhere": "1"}
    try:
        for key, name in names.items():
            subprocess.run([runtime, "run", "-d", "--name", name, "--label", f"{HARNESS_LABEL}={owners[key]}",
                            "--label", f"{HARNESS_NS_LABEL}={namespaces[key]}", *rt.run_options, BASE_IMAGE, "sleep",
                            "300"], check=True, capture_output=True)  # fmt: skip
        sweep_orphans(rt)  # its count may miss the dead one: another run's sweep on this runtime may take it first
        listed = subprocess.run([runtime, "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
        assert names["dead"] not in listed.stdout.split() and names["alive"] in listed.stdout.split()
        assert names["elsewhere"] in listed.stdout.split()
    finally:
        subprocess.run([runtime, "rm", "--force", "--time", "0", *names.values()], capture_output=True)


def test_a_root_container_agent_leaves_no_set_uid_file_or_device_on_the_host(cli, runtime, workspace, dataset) -> None:
    """Harbor tasks keep their image's user, root here: what the agent makes set-uid (or set-gid), or a device node
    it makes, must not come back to the host as such, also in a kept worktree (podman's nosuid mount protects only
    the container; a copy or a publication of the tree would not keep that mount option)."""
    agent = (
        "cp /bin/busybox suid && chmod 4755 suid && cp /bin/busybox sgid && chmod 2755 sgid "
        "&& mkdir -p deep/er && cp /bin/busybox deep/er/suid && chmod 6755 deep/er/suid "
        "&& (mknod null-dev c 1 3 || true) && echo 'Hello, world!' > /app/hello.txt"
    )
    result = _eval(cli, workspace, dataset / "hello-file", runtime, "--agent-cmd", agent, "--keep-worktrees")
    assert result.exit_code == 0, result.output
    (attempt,) = _attempts(json.loads(result.stdout))["hello-file"]
    assert attempt["outcome"] == "pass", attempt
    kept = Path(attempt["worktree"])
    modes = {}
    for path in kept.rglob("*"):
        st = path.lstat()
        assert not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)), path
        modes[path.relative_to(kept).as_posix()] = stat.S_IMODE(st.st_mode)
    assert {name: modes[name] for name in ("suid", "sgid", "deep/er/suid")} == dict.fromkeys(
        ("suid", "sgid", "deep/er/suid"), 0o755
    ), modes


def test_regrade_judges_a_container_tasks_stored_change_again(cli, runtime, workspace, dataset) -> None:
    """An attempt verified in a fresh room is judged again from its stored change; one whose verifier shared the
    agent's container (a Harbor task's default) depended on more than the change holds and is left out, with why."""
    shared = json.loads(_eval(cli, workspace, dataset / "fix-sum", runtime, "--agent", "oracle").stdout)
    assert [a["verifier_room"] for a in _attempts(shared)["fix-sum"]] == ["shared"]
    args = ["regrade", shared["run"]["id"], "--suite", str(dataset / "fix-sum"), "--trust", "--format", "json"]
    result = cli([*args, "--runtime", runtime, "--quiet"], cwd=workspace)
    (left,) = json.loads(result.stdout)["run"]["reuse"]["not_regraded"] if result.exit_code == 0 else [result.output]
    assert "verifier mode shared" in left["reason"], left
    first = _eval(cli, workspace, dataset / "fix-sum", runtime, "--agent", "oracle", "--verifier-room", "fresh")
    envelope = json.loads(first.stdout)
    assert [a["outcome"] for a in _attempts(envelope)["fix-sum"]] == ["pass"]
    tests = dataset / "fix-sum" / "tests" / "test.sh"  # a stricter verifier the oracle's change does not satisfy
    tests.write_text(tests.read_text().replace("ok=1\n", 'ok=1\n[ "$(sh /app/sum.sh 2 2)" = "5" ] || ok=0\n'))
    args = ["regrade", envelope["run"]["id"], "--suite", str(dataset / "fix-sum"), "--trust", "--format", "json"]
    result = cli([*args, "--runtime", runtime, "--quiet"], cwd=workspace)
    assert result.exit_code == 0, result.output
    assert not json.loads(result.stdout)["run"]["reuse"]["not_regraded"], result.stdout
    (attempt,) = _attempts(json.loads(result.stdout))["fix-sum"]
    assert (attempt["outcome"], attempt["reward"], attempt["claimed"]) == ("fail", 0.0, True)
    assert attempt["provenance"]["kind"] == "regraded" and attempt["provenance"]["reverified"]


def test_a_cancelled_command_ends_inside_the_container_and_the_container_stays(runtime, tmp_path: Path) -> None:
    """A command exec'd into an attempt's container runs under the runtime's monitor, outside the harness's process
    tree: when it is ended early (a deadline, a cost cap) the processes inside that carry its token end with it,
    one that ignores SIGTERM too, while the container (and the attempt's next phase) goes on."""
    import threading

    from worktrial.isolation import proc
    from worktrial.isolation.attempt_container import AttemptContainer, ContainerView, Mounts
    from worktrial.isolation.container import ContainerEnv, ContainerPlan, find_runtime, probe

    rt = probe(find_runtime(runtime), BASE_IMAGE)
    worktree, scratch = tmp_path / "wt", tmp_path / "scratch"
    worktree.mkdir()
    scratch.mkdir()
    box = AttemptContainer(
        ContainerPlan(rt), ContainerEnv(image=BASE_IMAGE, digest=""), Mounts(worktree, (), (), scratch), network="off"
    )
    scope = proc.ProcessScope().confined(ContainerView(box))
    cancel = threading.Event()

    def cancel_once_started() -> None:
        while not (worktree / "started").exists():
            subprocess.run(["sleep", "0.1"], check=True)
        cancel.set()

    watcher = threading.Thread(target=cancel_once_started, daemon=True)
    watcher.start()
    script = "trap '' TERM; (trap '' TERM; exec sleep 3001) & touch /app/started; wait"
    try:
        result = proc.run(["/bin/sh", "-c", script], cwd=worktree, scope=scope, cancel=cancel, term_grace=0.5)
        assert result.cancelled
        inside = subprocess.run([runtime, "exec", box.name, "ps"], capture_output=True, text=True, check=True)
        assert "sleep 3001" not in inside.stdout, inside.stdout
        assert box.running
    finally:
        box.remove()
        subprocess.run([runtime, "rm", "--force", box.name], capture_output=True)
