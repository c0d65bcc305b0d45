"""The executor seam: what a run hands to whatever runs its attempts, and what comes back.

The driver (``engine.run``) plans attempts as ``AttemptJob`` values, submits them to an ``Executor`` and reads
``ExecutorEvent`` values back in its own thread, where it decides retries, persists records and writes traces.
A job is plain data that can be pickled to another machine: it names the agent and where to fetch the repository,
never a secret (a worker resolves API keys from its own environment). A result is data too: the attempt record
and its trace, written to disk by the driver, not by the worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from worktrial.agents.base import AgentError, AgentOptions
from worktrial.isolation.container import ContainerPlan
from worktrial.isolation.sandbox import SandboxDecision, SandboxSettings
from worktrial.model.artifacts import AttemptArtifacts
from worktrial.model.records import AttemptRecord
from worktrial.model.run_config import DEFAULT_GRACE_SECS
from worktrial.model.suite import Environment, Task
from worktrial.model.trace import Trace

TICK_SECS = 1.0
"""While nothing happens, executors yield a ``tick`` event at least this often."""


@dataclass(frozen=True)
class RepoSource:
    """Where a worker gets the repository whose base commit every attempt starts from.

    ``path``: a local repository whose objects are borrowed (the local executor); ``bundle``: a git bundle
    file a worker clones once (a remote executor ships the bundle with the run).
    """

    kind: Literal["path", "bundle"]
    location: str


@dataclass(frozen=True)
class TaskBase:
    """Where one task's attempts start: a repository, a commit in it, and the environment set up on top.

    Tasks that share all three share slots (the environment is set up once per slot, not once per attempt).
    """

    source: RepoSource
    commit: str
    environment: Environment | None = None
    hide: tuple[str, ...] = ()
    """Paths removed from the base (the suite's directory when it is committed in the repository under test)."""

    @property
    def key(self) -> str:
        env = self.environment.model_dump_json() if self.environment is not None else ""
        return f"{self.source.kind}:{self.source.location}@{self.commit}#{env}#{':'.join(self.hide)}"

    @property
    def prepared(self) -> bool:
        """Whether the base is a commit the harness makes on top of ``commit`` (environment setup or hidden paths;
        a container environment is the image the attempt runs in, never a setup)."""
        return (self.environment is not None and bool(self.environment.setup)) or bool(self.hide)

    @property
    def container(self) -> bool:
        """Whether the task's commands run in a container of its environment's image (docs/environments.md)."""
        return self.environment is not None and self.environment.container


@dataclass(frozen=True)
class AgentRef:
    """The agent under test as data: its registered name and options (config holds no secrets by design)."""

    name: str
    options: AgentOptions


@dataclass(frozen=True)
class AttemptSpec:
    """What every attempt of one run shares; sent once per job so a job is self-contained."""

    run_id: str
    suite_sha256: str
    base_commit: str
    source: RepoSource
    agent: AgentRef
    verify_always: bool = False
    keep_worktrees: bool = False
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for the attempt's processes (never credentials: workers add their own)."""
    artifacts: bool = True
    """Keep per-attempt artifacts (command output, agent output, patch); off with --no-artifacts."""
    suite_dir: str | None = None
    """The run's read-only copy of the suite's declared files: ``$WORKTRIAL_SUITE_DIR`` for setup and verify."""
    artifacts_dir: str | None = None
    """Where environment setup logs are kept (the run's store directory), when the worker can write there."""
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    """--sandbox, --network, --max-memory, --max-procs and the host paths attempts must not see."""
    sandbox_decision: SandboxDecision | None = None
    """What the driver found this machine can do; None: decide on the worker (``decide``)."""
    suite_digest: str | None = None
    """The suite bundle digest (suite file plus declared files): a remote worker checks its copy against it."""
    grace_secs: float = DEFAULT_GRACE_SECS
    """``--grace-secs``: between SIGTERM at the agent's deadline and SIGKILL."""
    max_cost_per_attempt: float | None = None
    """``--max-cost-per-attempt`` in USD: an attempt whose spend passes it ends as a failure."""
    environment_cache: str | None = None
    """Directory of the cache of environment setups across runs (for environments with a ``cache_key``)."""
    containers: ContainerPlan | None = None
    """The runtime and each container task's image (docs/environments.md); None: no task runs in a container."""
    trajectories: bool = False
    """``--trajectories``: record each attempt's conversation with its model (``engine/trajectory.py``)."""
    agent_version: str | None = None
    """The agent's version as its preflight found it, for the trajectory's ``agent`` object."""
    replays: bool = False
    """Some jobs rebuild stored changes (``AttemptJob.replay``), which the harness writes from the host: their
    slots copy (an overlay room is mounted only in the sandbox)."""


@dataclass(frozen=True)
class Replay:
    """An attempt judged again without its agent (``regrade``, ``eval --reuse``): in place of the setup commands
    and the agent's run, its stored change is rebuilt in the checkout; then it is verified as any attempt is."""

    change: str
    """The stored change file (``state/artifacts.py``'s ``change.diff``) on this machine."""
    sha256: str
    """Its digest, from the signed record: a file that differs is refused."""
    claimed: bool | None
    """What the agent claimed then."""
    timed_out: bool
    """It passed its deadline then (verified only where the task says ``on_timeout: verify``)."""


@dataclass(frozen=True)
class AttemptJob:
    """One attempt to run: a task of the suite and its 1-based attempt number."""

    spec: AttemptSpec
    task: Task
    attempt: int
    try_number: int = 1
    """1 for the first try; the driver resubmits an infrastructure error as try 2, 3, ..."""
    base: TaskBase | None = None
    """The task's own base; None means the run's source and base commit with no environment."""
    replay: Replay | None = None
    """Judge a stored attempt again instead of running the agent (its setup commands' effects are in the change)."""

    def resolved_base(self) -> TaskBase:
        return self.base or TaskBase(self.spec.source, self.spec.base_commit)

    @property
    def key(self) -> tuple[str, int]:
        return (self.task.id, self.attempt)


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt produced, as data: the record (its ``trace`` path is set by the driver) and the trace."""

    record: AttemptRecord
    trace: Trace
    fatal: AgentError | None = None
    """Set when the agent broke in a way that would repeat on every attempt (e.g. a rejected API key)."""
    worker: str | None = None
    """Where it ran (a thread, a node), for diagnostics only."""
    artifacts: AttemptArtifacts | None = None
    """Logs and patch, already bounded and redacted; the driver stores them locally (never in the envelope)."""
    over_budget: str | None = None
    """Set when the run's ``--max-cost``, kept live at the model gateway, ended the attempt: the driver stores no
    record (like an attempt abandoned by a stopping run, it reruns on resume) and stops the run."""
    trajectory: str | None = None
    """The attempt's ATIF trajectory as JSON, redacted and bounded (``--trajectories``); the driver stores it next
    to the artifacts and records its digest."""
    change: bytes | None = None
    """The agent's exact change (``PatchData.exact``) when the record's ``change`` names its digest: the driver
    stores it beside the artifacts, for ``regrade``."""
    unreplayed: str | None = None
    """A replayed job (``AttemptJob.replay``) whose stored change could not be rebuilt: why (its record is no
    verdict)."""


@dataclass(frozen=True)
class ExecutorEvent:
    """``start``: the job began on a worker; ``done``: it finished with ``result``; ``tick``: nothing happened for
    a while (no job), so the driver can look at the run between events (``--jobs auto``).

    A job abandoned because the run is stopping gets no ``done`` event: it reruns on resume.
    """

    kind: Literal["start", "phase", "done", "tick"]
    job: AttemptJob | None = None
    result: AttemptResult | None = None
    phase: str | None = None
    """For ``phase`` events: the phase the attempt entered (setup, agent, verify); executors may omit them."""


class Executor(Protocol):
    """Runs attempt jobs somewhere (threads here, a cluster elsewhere) and streams events back."""

    def preflight(self, agent: AgentRef) -> dict[str, Any]:
        """Build the agent where attempts run and check it can work; returns its ``describe()``.

        Raises BadInputError (e.g. program not installed, key missing) before any attempt starts.
        """
        ...

    def submit(self, job: AttemptJob) -> None:
        """Queue a job; may be called while ``events`` is being iterated (retries)."""
        ...

    def events(self) -> Iterator[ExecutorEvent]:
        """Start and done events in the caller's thread, until every submitted job is done or abandoned; a
        ``tick`` at least every ``TICK_SECS`` while the wait goes on."""
        ...

    def stop(self) -> None:
        """Start no more jobs and end the running attempts' processes."""
        ...

    def close(self, timeout: float | None) -> bool:
        """Release workers and their slots; False if some were still busy after ``timeout`` seconds (None: wait
        for them)."""
        ...
