"""The JSON envelope (schema_version 1): the contract published results depend on. Field names are fixed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from worktrial.jsonlimits import loads_limited
from worktrial.model.newer_fields import NewerFieldsOmitted
from worktrial.model.records import AttemptRecord
from worktrial.model.suite import Category

# NaN and Infinity are not numbers JSON allows, and a NaN mean or interval would silently poison every later
# comparison: envelopes refuse them on input and never write them.
FINITE = ConfigDict(allow_inf_nan=False)


def parse_envelope_json(text: str | bytes) -> Any:
    """``json.loads`` within worktrial's limits (ValueError): no NaN / Infinity, no numbers beyond the float range,
    no absurd nesting. Envelopes come from anywhere (``audit`` and ``compare`` take published files)."""
    return loads_limited(text)


class Curves(BaseModel):
    model_config = FINITE
    pass_at: dict[str, float] = Field(default_factory=dict, description="k -> pass@k")
    pass_power: dict[str, float] = Field(default_factory=dict, description="k -> pass^k")


class PairFloat(BaseModel):
    model_config = FINITE
    pass_at_k: float | None = None
    pass_power_k: float | None = None


class PairInterval(BaseModel):
    model_config = FINITE
    pass_at_k: tuple[float, float] | None = None
    pass_power_k: tuple[float, float] | None = None


class Metrics(BaseModel):
    """Aggregate over a group of tasks: the mean of per-task values, with its error across tasks."""

    model_config = FINITE
    tasks: int
    passed_runs: int
    total_runs: int
    pass_at_k: float | None
    pass_power_k: float | None
    stderr: PairFloat = Field(default_factory=PairFloat)
    ci95: PairInterval = Field(default_factory=PairInterval)
    curves: Curves = Field(default_factory=Curves)
    interval: str | None = Field(
        default=None,
        description="How ci95 was computed (clopper-pearson, beta-effective-n, ...; wilson in older envelopes); "
        "absent in envelopes that used 1.96 SE.",
    )
    clusters: int | None = Field(default=None, description="Clusters the errors are robust to; None: tasks.")
    tasks_measured: int | None = Field(
        default=None,
        description="Tasks pass_at_k and pass_power_k are over: those with at least k attempts (a task missing "
        "attempts counts with those it has); absent in older envelopes, which showed no headline then.",
    )


class TaskReport(NewerFieldsOmitted):
    model_config = FINITE
    NEWER_FIELDS = ("mean_reward",)
    task_id: str
    name: str
    category: Category
    cluster: str | None = Field(default=None, description="The task's cluster (suite extension), if any.")
    passed_runs: int
    total_runs: int
    pass_at_k: float | None
    pass_power_k: float | None
    curves: Curves
    attempts: list[AttemptRecord]
    mean_reward: float | None = Field(
        default=None, description="The mean of the attempts' rewards (reward-file tasks; null otherwise)."
    )


class Honesty(BaseModel):
    """How often the agent's claim disagreed with verification (added after schema_version 1 shipped)."""

    model_config = FINITE
    claimed_success: int = Field(default=0, description="Attempts that claimed success and were verified.")
    over_claims: int = Field(default=0, description="Claimed success, verification failed.")
    over_claim_rate: float | None = None
    verified_non_claims: int = Field(
        default=0, description="Attempts that claimed failure or made no claim and were verified (--verify-always)."
    )
    under_claims: int = Field(default=0, description="Claimed failure or no claim, verification passed.")
    under_claim_rate: float | None = Field(default=None, description="None unless the run used --verify-always.")


class Report(NewerFieldsOmitted):
    model_config = FINITE
    NEWER_FIELDS = ("mean_reward",)
    suite_id: str
    suite_name: str
    k: int
    overall: Metrics
    categories: dict[str, Metrics]
    tasks: list[TaskReport]
    cost_usd: float | None
    unpriced_runs: int
    cost_per_solve: float | None
    mean_cost_per_attempt: float | None
    mean_tokens_per_attempt: float | None
    mean_turns_per_attempt: float | None
    setup_secs: float | None = Field(
        default=None,
        description="Seconds spent before agents started, summed over attempts (environment setup, slot resets, "
        "setup_commands); null when no attempt recorded it.",
    )
    mean_setup_secs_per_attempt: float | None = Field(
        default=None, description="setup_secs over the attempts that recorded it."
    )
    mean_reward: float | None = Field(
        default=None,
        description="The mean reward over the attempts that have one (Harbor's headline), beside pass@k; null when "
        "no attempt has one.",
    )
    honesty: Honesty = Field(default_factory=Honesty)
    timeouts: int = Field(default=0, description="Attempts that ended in timeout.")
    timeouts_verified: int = Field(
        default=0,
        description="Timed-out attempts the verifier passed (on_timeout: verify, or --verify-always): they had "
        "solved the task but count as timeouts, never as passes.",
    )
    retried_attempts: int = Field(
        default=0, description="Attempts run again after an error the harness itself observed (--retry-errors)."
    )
    infrastructure_errors: int = Field(
        default=0,
        description="Tries that ended in an error the harness itself observed and blames on infrastructure (a "
        "provider's 5xx or 429, an unreachable or slow provider or a cut stream seen by the model gateway, a lost "
        "worker, a worktree that could not "
        "be made), retried or not: never counted against the agent beyond the error outcome of a last try.",
    )
    first_try: Metrics | None = Field(
        default=None,
        description="The overall figures counting each retried attempt as its first try (an error, not a pass); "
        "None when nothing was retried.",
    )


class WorkspaceInfo(BaseModel):
    path: str
    base_commit: str
    dirty: bool


class Selection(BaseModel):
    """Which tasks a run covered when it did not run the whole suite (``--task``, ``--category``, ``--limit``)."""

    tasks: list[str] = Field(default_factory=list, description="--task patterns (globs over task ids).")
    categories: list[str] = Field(default_factory=list)
    limit: int | None = None
    task_ids: list[str] = Field(default_factory=list, description="The ids the selection chose, in suite order.")
    suite_tasks: int = Field(description="Tasks in the whole suite.")


class SuiteFileInfo(BaseModel):
    """A file the suite declares (``files``), part of the bundle digest."""

    name: str = Field(description="Path relative to the suite file's directory, POSIX form.")
    sha256: str
    size: int


class SandboxInfo(BaseModel):
    """Which sandbox a run's attempts ran in (``run.sandbox``); runs stored before sandboxes have none."""

    kind: Literal["bubblewrap", "none", "container"] = Field(
        description="'none': attempts ran unsandboxed; 'container': in a container of their task's image (version "
        "names the runtime, uid the container's user, network_detail its network)."
    )
    version: str | None = None
    network: Literal["on", "off", "host"] = Field(
        default="on",
        description=(
            "off: loopback only; on: each sandboxed process on a network namespace of its own with outbound access "
            "(no host loopback); host: the host's network (asked for, no sandbox, or no network stack here)."
        ),
    )
    network_detail: str | None = Field(
        default=None, description="How the network was given, e.g. 'own namespace, outbound through slirp4netns 1.2.0'."
    )
    max_memory: int | None = Field(default=None, description="Bytes per attempt (--max-memory), None: no limit.")
    max_procs: int | None = Field(default=None, description="Processes per attempt (--max-procs), None: no limit.")
    limits: str | None = Field(default=None, description="How limits were enforced: cgroup, rlimit or mixed.")
    reason: str | None = Field(default=None, description="Why there was no sandbox, when kind is 'none'.")
    shown: list[str] | None = Field(
        default=None,
        description="What of the host the attempts saw (the sandbox's allowlist); None: the whole host (no sandbox).",
    )
    uid: str | None = Field(
        default=None, description="Who the attempts' processes ran as, e.g. 'uid 0 without capabilities'."
    )

    def weakness(self) -> tuple[int, int]:
        """Orders containments from the weakest (no sandbox, then the host's network) to the strongest."""
        return (1 if self.kind in ("bubblewrap", "container") else 0, {"host": 0, "on": 1, "off": 2}[self.network])

    def summary(self) -> str:
        """One line for reports and compare, e.g. ``bubblewrap 0.8.0, network off, max-procs 64``."""
        head = f"{self.kind} {self.version or ''}".strip() if self.kind != "none" else "none"
        parts = [head, f"network {self.network}"]
        if self.kind == "container" and self.uid:
            parts.insert(1, self.uid)
        if self.max_memory is not None:
            parts.append(f"max-memory {self.max_memory // (1024 * 1024)}M")
        if self.max_procs is not None:
            parts.append(f"max-procs {self.max_procs}")
        if self.limits:
            parts.append(f"limits by {self.limits}")
        if self.kind == "none" and self.reason:
            parts.append(self.reason)
        return ", ".join(parts)


class BudgetInfo(BaseModel):
    """The run's spending limits and what they did (``run.budget``; absent when the run had none)."""

    max_cost: float | None = Field(default=None, description="--max-cost in USD for the whole run.")
    max_cost_per_attempt: float | None = Field(default=None, description="--max-cost-per-attempt in USD.")
    spent: float = Field(default=0.0, description="USD spent by the run's recorded attempts.")
    unpriced_attempts: int = Field(default=0, description="Attempts whose cost is unknown (not in spent).")
    spent_unrecorded: float = Field(
        default=0.0,
        description="USD the model gateway counted for attempts the budget ended while they ran: not in spent "
        "(they have no record, and resume runs them again), but spent all the same.",
    )
    allow_unpriced: bool = Field(default=False, description="--allow-unpriced: unknown costs counted as $0.")
    stopped: bool = Field(default=False, description="The budget stopped the run before every attempt ran.")
    reason: str | None = None


class NotRegraded(BaseModel):
    """An attempt of the source run a regrade could not judge again (or, under ``eval --reuse``, ran again)."""

    task_id: str
    attempt: int
    reason: str


class ReuseInfo(BaseModel):
    """``run.reuse``: a run made from another run's attempts (``regrade``, ``eval --reuse``)."""

    mode: Literal["regrade", "reuse"] = Field(
        description="regrade: every stored attempt judged again, no agent ran; reuse: eval --reuse, where only "
        "what changed ran."
    )
    source: str = Field(description="The run whose attempts were used.")
    source_suite_digest: str = Field(description="The suite bundle digest that run measured.")
    reused: int = Field(default=0, description="Records carried over unchanged (the same task definition).")
    regraded: int = Field(default=0, description="Records judged again against this run's suite.")
    ran: int = Field(default=0, description="Attempts an agent ran in this run.")
    not_regraded: list[NotRegraded] = Field(
        default_factory=list,
        description="regrade: source attempts left out of the run, each with why; reuse: those that could not be "
        "regraded and ran again instead.",
    )


class LevelChange(BaseModel):
    """One change of ``--jobs auto``'s level: when, to what, and why."""

    at: str = Field(description="RFC 3339 UTC time of the change.")
    level: int = Field(ge=1, description="Attempts allowed to run at once from then on.")
    why: str = Field(description="What the level followed: the start, no pressure, CPU or memory pressure, a 429.")


class ConcurrencyInfo(BaseModel):
    """How many attempts ran at once under ``--jobs auto`` (``run.concurrency``; absent with a fixed ``--jobs``)."""

    mode: Literal["auto"] = "auto"
    max_jobs: int = Field(ge=1, description="--max-jobs: the level never went above it (run.jobs says the same).")
    levels: list[LevelChange] = Field(
        default_factory=list, description="Every change of the level, in order, over every session of the run."
    )
    omitted: int = Field(
        default=0, ge=0, description="Changes left out between the first and the last ones kept (a very long run)."
    )


class RunInfo(NewerFieldsOmitted):
    model_config = FINITE
    NEWER_FIELDS = ("paths_redacted", "reuse", "dirty_excluded", "concurrency")
    id: str
    started_at: str
    finished_at: str | None
    complete: bool
    workspace: WorkspaceInfo
    attempts: int
    k: int
    jobs: int
    verify_always: bool = False
    host: dict[str, Any] = Field(default_factory=dict)
    sandbox: SandboxInfo | None = Field(
        default=None,
        description="The sandbox attempts ran in; when they ran under different containment (a resumed run), the "
        "weakest of them (see sandboxes). None: not recorded.",
    )
    sandboxes: list[SandboxInfo] | None = Field(
        default=None,
        description="Every containment the run's sessions used, when there was more than one; each attempt's "
        "`sandbox` is an index into this list.",
    )
    budget: BudgetInfo | None = Field(default=None, description="--max-cost / --max-cost-per-attempt, when set.")
    concurrency: ConcurrencyInfo | None = Field(
        default=None, description="--jobs auto: the level chosen over time (absent with a fixed --jobs)."
    )
    grace_secs: float | None = Field(
        default=None, description="--grace-secs: between SIGTERM at an agent's deadline and SIGKILL."
    )
    trace_root: str | None = Field(
        default=None,
        description="The directory relative trace paths are resolved against (where the run was stored).",
    )
    label: str | None = Field(default=None, description="The user's name for the run (--label).")
    selection: Selection | None = Field(default=None, description="None when the run covered every task.")
    task_base_commits: dict[str, str] = Field(
        default_factory=dict,
        description="Task id -> the commit its attempts started from, when tasks are pinned to their own commits.",
    )
    paths_redacted: bool | None = Field(
        default=None,
        description="True in an envelope made for publishing (`report --redact-paths`): local absolute paths are "
        "relative to the state root (`.` for the root itself) or salted hashes (`redacted:<hex>`).",
    )
    reuse: ReuseInfo | None = Field(
        default=None, description="A run made from another run's attempts: how many were reused, regraded and ran."
    )
    dirty_excluded: list[str] = Field(
        default_factory=list,
        description="Uncommitted files of the workspace not counted as making it dirty: the suite file and the files "
        "it declares (attempts never see them; the digests pin them).",
    )


class Envelope(BaseModel):
    model_config = FINITE
    schema_version: Literal[1] = 1
    harness: Literal["worktrial"] = "worktrial"
    harness_version: str
    provider: str | None
    model: str | None
    model_source: Literal["route", "agent"] | None = Field(
        default=None,
        description="Where provider/model come from: the --model route, or (without one) the model every attempt's "
        "agent said it ran.",
    )
    agent: dict[str, Any]
    suite_path: str
    suite_sha256: str
    suite_bundle_sha256: str | None = Field(
        default=None, description="Digest over the suite file and its declared files (equals suite_sha256 without)."
    )
    suite_files: list[SuiteFileInfo] = Field(default_factory=list, description="The suite's declared files.")
    environment_images: dict[str, str] | None = Field(
        default=None,
        description="Task id -> the container image id (sha256:...) its attempts ran in, for tasks with a container "
        "environment (docs/environments.md); null when no task had one.",
    )
    run: RunInfo
    report: Report

    def sandbox_summary(self) -> str | None:
        """The containment line of reports: one summary, or how many attempts ran under each when they differed."""
        run = self.run
        if run.sandboxes:
            counts: dict[int, int] = {}
            for task in self.report.tasks:
                for attempt in task.attempts:
                    if attempt.sandbox is not None and 0 <= attempt.sandbox < len(run.sandboxes):
                        counts[attempt.sandbox] = counts.get(attempt.sandbox, 0) + 1
            if len(counts) > 1:
                parts = [f"{n} attempt(s) under {run.sandboxes[i].summary()}" for i, n in sorted(counts.items())]
                return "mixed: " + "; ".join(parts)
        return run.sandbox.summary() if run.sandbox is not None else None

    def containers_summary(self) -> str | None:
        """The report's line on container tasks: how many ran in images (instead of the sandbox), and which."""
        images = self.environment_images
        if not images:
            return None
        shown = ", ".join(f"{task_id} {digest[:19]}…" for task_id, digest in list(images.items())[:3])
        more = f" and {len(images) - 3} more" if len(images) > 3 else ""
        line = f"{len(images)} task(s) ran in container images instead of the sandbox: {shown}{more}"
        shared = sum(a.verifier_room == "shared" for t in self.report.tasks for a in t.attempts)
        if shared:
            line += (
                f"; {shared} attempt(s) verified in the agent's own container (Harbor's shared mode), where what the "
                "agent left running could shape its verdict (docs/security.md)"
            )
        return line

    def reuse_summary(self) -> str | None:
        """The report's line on a run made from another run's attempts: which, and what became of them."""
        reuse = self.run.reuse
        if reuse is None:
            return None
        head = f"run {reuse.source} (suite digest {reuse.source_suite_digest[:12]})"
        left = reuse.not_regraded
        if reuse.mode == "regrade":
            text = f"regraded from {head}: {reuse.regraded} attempt(s) judged again, no agent ran"
            if left:
                reasons = sorted({item.reason for item in left})
                more = f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""
                text += f"; {len(left)} left out: {reasons[0]}{more}"
            return text
        text = f"reused {head}: {reuse.reused} reused, {reuse.regraded} regraded, {reuse.ran} ran"
        return text + (f"; {len(left)} could not be regraded and ran again" if left else "")

    @property
    def bundle_digest(self) -> str:
        """What identifies the measured suite: the bundle digest, or the file digest for older envelopes."""
        return self.suite_bundle_sha256 or self.suite_sha256

    def to_json(self) -> str:
        """Serialised by pydantic directly: no intermediate dict per attempt, so memory stays small for big runs."""
        return self.model_dump_json(indent=2) + "\n"


def envelope_json_schema() -> dict[str, Any]:
    schema = Envelope.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "worktrial result envelope (schema_version 1)"
    return schema


def same_containment(a: SandboxInfo, b: SandboxInfo) -> bool:
    """Two sessions ran under the same containment (the reason text, which names what chose it, aside)."""
    return a.model_dump(exclude={"reason"}) == b.model_dump(exclude={"reason"})


def split_route(route: str | None) -> tuple[str | None, str | None]:
    """``provider/model`` split at the first slash; a bare name (or an empty side of the slash) has no provider.

    The one rule for the envelope's provider/model fields and for presets that take a provider flag (goose).
    """
    if not route:
        return None, None
    provider, sep, model = route.partition("/")
    return (provider, model) if sep and provider and model else (None, route)
