"""A container task's attempt: one container for its phases, as Harbor runs a trial (docs/environments.md).

The attempt's files are a host checkout as any task's (``FreshCheckout`` or ``SlotCheckout``: the worktree, seeded
with what the image holds at its working directory, is mounted there). Its phases run in one container of the
task's image (``isolation/attempt_container.py``): the healthcheck and setup commands, then the agent's, each an
``exec``. Where the verifier runs is the task's ``verifier_mode``:

- ``shared`` (Harbor's default): in the agent's own container once the agent's command has ended; the services it
  left running and its whole filesystem are what the tests check, so an agent can shape its verdict there, exactly
  as under Harbor (docs/security.md);
- ``separate``: the agent's container is removed with every process in it, and a new one of the image runs the
  tests on the worktree as the agent left it;
- ``fresh`` (worktrial's own suites, and ``--verifier-room fresh``): the same, on the worktree put back to files
  only from the base and the agent's changes, as for any task (``verifier.enter``).

``/tests`` and ``/logs/verifier`` are the harness's directories, mounted from the start and empty until
verification, when the harness clears them and puts the tests in; the reward file is read from the host. The
artifacts a task declares are copied out of the agent's container once the agent ended, as Harbor does, into the
run store. Everything the containers wrote is made inert on this host when they are removed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tarfile
import threading
import time
import uuid
from fnmatch import fnmatch
from pathlib import Path

from worktrial.engine.checkout import FreshCheckout, Room, SlotCheckout, harness_scope
from worktrial.engine.containers import combined_network
from worktrial.engine.executor import AttemptJob
from worktrial.errors import WorktrialError
from worktrial.isolation import ownership, proc
from worktrial.isolation.attempt_container import AttemptContainer, ContainerStartError, ContainerView, Mounts
from worktrial.isolation.change import AgentChange
from worktrial.isolation.container import ContainerEnv, ContainerPlan
from worktrial.isolation.sandbox import NetworkMode
from worktrial.isolation.workspace import remove_tree
from worktrial.model.harbor_config import Artifact, Healthcheck

log = logging.getLogger(__name__)

MAX_ARTIFACT_BYTES = 64 * 1024 * 1024
"""What one attempt's declared artifacts may take in the run store; past it the copy stops (and says so)."""
_SEED_LOCK = threading.Lock()


class SetupFailed(WorktrialError):
    """The task's container did not become ready for the agent (its healthcheck failed, or it would not start)."""


class ContainerCheckout:
    """One container task's attempt: a host checkout for its files, one container for its phases (see the
    module docstring)."""

    def __init__(
        self, files: FreshCheckout | SlotCheckout, job: AttemptJob, scope: proc.ProcessScope, work_root: Path
    ) -> None:
        plan = job.spec.containers
        assert plan is not None
        self.files, self.job, self.spec, self.run_scope, self.work_root = files, job, job.spec, scope, work_root
        self.plan: ContainerPlan = plan
        self.env: ContainerEnv = plan.tasks[job.task.id]
        self.mode = self.env.verifier_mode
        self.network = combined_network(self.env.network, self.spec.sandbox.network)
        self._boxes: list[AttemptContainer] = []
        self._agent: AttemptContainer | None = None
        self._dirs: Path | None = None

    # -- the Checkout protocol ----------------------------------------------------------------------------------

    def prepare(self) -> Room:
        self.files.prepare()
        ws = self.files.workspace
        self._dirs = ws.root / "container"
        for name in ("tests", "logs", "suite"):
            (self._dirs / name).mkdir(parents=True, exist_ok=True)
        if self.env.seed_workdir:
            _seed(self.plan, self.env, self.work_root, ws.worktree)
        agent = self._agent = self._container(ws.worktree, self.network)
        oracle = self.spec.agent.name == "oracle"
        view = ContainerView(agent, extra_env=self.env.solution_env if oracle else None)
        if self.env.healthcheck is not None:
            self._healthy(agent, self.env.healthcheck)
        return Room(ws.worktree, ws.root / "scratch", view, harness_scope(self.run_scope, view, self.spec))

    def change(self, max_bytes: int | None) -> AgentChange:
        """What the agent changed, once its command ended; its artifacts are collected now, before verification (as
        Harbor does), and outside the shared mode its container goes, with every process in it."""
        agent = self._agent
        assert agent is not None
        if self.env.artifacts:
            try:
                self._collect(agent)
            except ContainerStartError as exc:  # nothing ran in it, and it cannot start: nothing to collect
                log.warning("the artifacts of %s #%d were not collected: %s", self.job.task.id, self.job.attempt, exc)
        if self.mode != "shared":
            agent.remove()
        return self.files.change(max_bytes)

    def verifier_room(self, change: AgentChange) -> Room:
        ws, agent, dirs = self.files.workspace, self._agent, self._dirs
        assert agent is not None and dirs is not None
        self._verifier_files(dirs)
        single = len(self.job.task.verify_commands) == 1
        if self.mode == "shared":
            box, worktree, shown = agent, ws.worktree, tuple(Path(p) for p in (self.spec.suite_dir,) if p)
        else:
            files = self.files.verifier_files(change) if self.mode == "fresh" else None
            worktree = files.worktree if files is not None else ws.worktree
            shown = files.shown if files is not None else tuple(Path(p) for p in (self.spec.suite_dir,) if p)
            network = combined_network(self.env.verifier_network or self.env.network, self.spec.sandbox.network)
            box = self._container(worktree, network, readonly=tuple(p for p in shown if p.is_dir()))
        if self.env.tests_dir is not None and box.uid is not None and os.geteuid() == 0:
            ownership.hand_over(dirs, box.uid)
        view = ContainerView(
            box, user=self.env.verifier_user, extra_env=self.env.verifier_env, last=single and not box.running
        )
        scope = self.run_scope.confined(view.widened(shown))
        reward_dir = dirs / "logs" if self.env.tests_dir is not None else None
        return Room(worktree, ws.root / "scratch", view, scope, reward_dir=reward_dir)

    def release(self) -> None:
        try:
            for box in self._boxes:
                box.remove()
        finally:
            self.files.release()

    @property
    def kept(self) -> Path | None:
        return self.files.kept

    @property
    def verifier_mode(self) -> str:
        return self.mode

    # -- the containers -----------------------------------------------------------------------------------------

    def _container(self, worktree: Path, network: NetworkMode, readonly: tuple[Path, ...] = ()) -> AttemptContainer:
        """A container of the task's image over ``worktree`` (not started yet: it starts at its first command)."""
        ws, dirs = self.files.workspace, self._dirs
        assert dirs is not None
        source = self.files.source
        borrowed = tuple(p for p in ([source.objects_dir] if source is not None else []) if p.is_dir())
        suite = Path(self.spec.suite_dir) if self.spec.suite_dir else None
        extra: list[tuple[Path, str, bool]] = [(dirs / "logs", "/logs/verifier", True)]
        if self.env.tests_dir is not None:
            extra.append((dirs / "tests", "/tests", True))
        mounts = Mounts(
            worktree=worktree,
            writable=(ws.git_dir,),
            readonly=(*borrowed, *(p for p in readonly if p != suite)),
            scratch=ws.root / "scratch",
            extra=tuple(extra),
            views=((suite, dirs / "suite"),) if suite is not None else (),
        )
        limits = self.spec.sandbox.limits
        box = AttemptContainer(
            self.plan,
            self.env,
            mounts,
            network=network,
            max_memory=limits.max_memory,
            max_procs=limits.max_procs,
        )
        self._boxes.append(box)
        return box

    def _verifier_files(self, dirs: Path) -> None:
        """``/logs/verifier`` emptied and ``/tests`` put in, now that the agent's command has ended (in the shared
        mode what the agent left running could still write there: it can shape its verdict, as under Harbor)."""
        for name in ("logs", "tests"):
            _empty(dirs / name)
        if self.env.tests_dir is not None and self.spec.suite_dir:
            shutil.copytree(Path(self.spec.suite_dir) / self.env.tests_dir, dirs / "tests", dirs_exist_ok=True)
            for entry in (dirs / "tests", *(dirs / "tests").rglob("*")):  # a copy of the read-only bundle
                if not entry.is_symlink():
                    entry.chmod(entry.stat().st_mode | 0o200)

    def _healthy(self, box: AttemptContainer, check: Healthcheck) -> None:
        """Wait for the task's healthcheck to pass before the agent starts, as Harbor does (Docker's HEALTHCHECK
        rules: failures in the start period do not count; ``retries`` consecutive ones after it fail the attempt)."""
        scope = self.run_scope.confined(ContainerView(box))
        ws = self.files.workspace
        try:
            box.start()
        except ContainerStartError as exc:
            raise SetupFailed(str(exc)) from None
        start_period_end = time.monotonic() + check.start_period_sec
        failures = 0
        while True:
            in_start_period = time.monotonic() < start_period_end
            ran = proc.run(["sh", "-c", check.command], cwd=ws.worktree, env={}, timeout=check.timeout_sec, scope=scope)
            if ran.ok:
                return
            if ran.interrupted:
                raise SetupFailed("interrupted during the healthcheck")
            if not in_start_period:
                failures += 1
                if failures >= check.retries:
                    why = ran.describe_failure("the healthcheck")
                    raise SetupFailed(f"healthcheck failed {failures} times in a row ({why}): {check.command[:200]}")
            time.sleep(check.start_interval_sec if in_start_period else check.interval_sec)

    def _collect(self, box: AttemptContainer) -> None:
        """Copy the task's declared artifacts out of the agent's container into the run store (bounded, and
        extracted as data only: no link out of the target, no device, no set-uid bit)."""
        if not self.spec.artifacts_dir:
            return
        target = Path(self.spec.artifacts_dir) / "collected" / f"{self.job.task.id}-{self.job.attempt}"
        remove_tree(target)
        target.mkdir(parents=True)
        budget = MAX_ARTIFACT_BYTES
        for artifact in self.env.artifacts:
            budget -= _copy_out(self.plan, box, artifact, target, budget)
            if budget <= 0:
                (target / "TRUNCATED").write_text(f"artifacts past {MAX_ARTIFACT_BYTES // 2**20} MiB were not kept\n")
                break


def _copy_out(plan: ContainerPlan, box: AttemptContainer, artifact: Artifact, target: Path, budget: int) -> int:
    """One artifact (``cp`` of the runtime as a tar stream, at most ``budget`` bytes of it); the bytes it took."""
    box.start()
    archive = target / ".artifact.tar"
    taken = 0
    with archive.open("wb") as out:

        def keep(chunk: bytes) -> None:
            nonlocal taken
            room = budget - taken
            if room > 0:
                out.write(chunk[:room])
            taken += len(chunk)

        rt = plan.runtime
        argv = [rt.program, "cp", f"{box.name}:{artifact.source}", "-"]
        ran = proc.run(argv, cwd="/", timeout=600, sweep=False, on_stdout=keep, tail_bytes=1024)
    try:
        if ran.ok and taken <= budget:
            name = artifact.destination or artifact.source.strip("/").replace("/", "_") or "root"
            dest = target / name
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive) as tar:
                members = [m for m in tar.getmembers() if not any(_matches(m.name, x) for x in artifact.exclude)]
                tar.extractall(dest, members=members, filter="data")
            ownership.strip_privileges(dest)
        elif not ran.ok:
            log.info("artifact %s of task %s: %s", artifact.source, box.env.image[:19], ran.describe_failure("cp"))
    except (tarfile.TarError, OSError) as exc:
        log.warning("artifact %s could not be kept: %s", artifact.source, exc)
    finally:
        archive.unlink(missing_ok=True)
    return min(taken, budget)


def _matches(name: str, pattern: str) -> bool:
    return fnmatch(name, pattern) or fnmatch(Path(name).name, pattern)


def _empty(directory: Path) -> None:
    """Remove what is in ``directory`` without following a link (what a container left there is hostile)."""
    for entry in list(directory.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            remove_tree(entry)
        else:
            entry.unlink(missing_ok=True)


def _seed(plan: ContainerPlan, env: ContainerEnv, work_root: Path, worktree: Path) -> None:
    """Copy what the image holds at its workdir into the worktree, which is mounted over it (a Harbor task's files
    are in its image): taken out of the image once per run (``create``, ``cp``, ``rm``), then copied from there for
    each attempt. Nothing there is not an error."""
    key = hashlib.sha256(f"{env.image}\0{env.workdir}".encode()).hexdigest()[:16]
    seeds = work_root / "image-seeds"
    cached = seeds / key
    with _SEED_LOCK:
        if not cached.is_dir():
            _extract_workdir(plan, env, seeds / f".{key}.partial")
            (seeds / f".{key}.partial").rename(cached)
    shutil.copytree(cached, worktree, symlinks=True, dirs_exist_ok=True, copy_function=_copy_owned)
    ownership.strip_privileges(worktree)


def _copy_owned(src: str, dst: str) -> None:
    shutil.copy2(src, dst, follow_symlinks=False)
    if os.geteuid() == 0:
        st = os.lstat(src)
        os.lchown(dst, st.st_uid, st.st_gid)


def _extract_workdir(plan: ContainerPlan, env: ContainerEnv, target: Path) -> None:
    rt = plan.runtime
    remove_tree(target)
    target.mkdir(parents=True)
    name = f"worktrial-seed-{uuid.uuid4().hex[:12]}"
    created = proc.run(
        [rt.program, "create", "--name", name, env.image, "/bin/true"], cwd="/", timeout=120, sweep=False
    )
    if not created.ok:
        detail = created.stderr_tail.decode("utf-8", "replace").strip()
        raise WorktrialError(f"{rt.name} create of {env.image} failed: {detail[-300:]}")
    try:
        source = f"{name}:{env.workdir.rstrip('/')}/."
        proc.run([rt.program, "cp", source, str(target)], cwd="/", timeout=600, sweep=False)
    finally:
        proc.run([rt.program, "rm", "--force", name], cwd="/", timeout=120, sweep=False)
    ownership.strip_privileges(target)  # the image's files, copied out as they are
