"""Suite and Task models, loading with located errors, and the JSON Schema of the format."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StringConstraints,
    ValidationError,
    model_validator,
)

from worktrial.errors import SuiteError
from worktrial.jsonlimits import MAX_SUITE_BYTES, JsonLimitError, check_limits, loads_limited
from worktrial.model.bundle import BundleFile, bundle_digest, collect_bundle
from worktrial.model.commands import ArgvCommand, Command, ShCommand
from worktrial.model.harbor_config import HarborRuntime
from worktrial.safe_read import InputFileError, read_input

Category = Literal["capability", "regression"]
CATEGORIES: tuple[Category, ...] = ("capability", "regression")
DEFAULT_TIMEOUT_SECS = 600
DEFAULT_VERIFY_TIMEOUT_SECS = 300
DEFAULT_ENVIRONMENT_TIMEOUT_SECS = 1800
MAX_ATTEMPTS = 10_000
"""Attempts per task: more is never a statistics question, and a typo (1000000000) must not start a run."""
MAX_TIMEOUT_SECS = 7 * 24 * 3600
"""A week: any longer limit is a typo, and a huge one overflows the clock arithmetic of deadlines."""
SUITE_DIR_ENV = "WORKTRIAL_SUITE_DIR"


def _coerce_command(value: Any) -> Any:
    """Turn one raw command into its form, with an error that says what forms exist."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("command is empty")
        return value
    if isinstance(value, dict):
        keys = set(value)
        if keys == {"argv"}:
            argv = value["argv"]
            if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
                raise ValueError('"argv" must be a non-empty list of strings')
            if not argv[0]:
                raise ValueError('"argv" must start with a program name')
            return ArgvCommand(argv=argv)
        if keys == {"sh"}:
            if not isinstance(value["sh"], str) or not value["sh"].strip():
                raise ValueError('"sh" must be a non-empty string')
            return ShCommand(sh=value["sh"])
    raise ValueError(
        'a command is a string, {"argv": ["prog", "arg", ...]} or {"sh": "shell line"}; '
        f"got {json.dumps(value)[:80]}"
    )


CommandField = Annotated[Command, BeforeValidator(_coerce_command)]
NonEmptyId = Annotated[str, StringConstraints(strip_whitespace=False, pattern=r"\S")]


def _repo_path(value: str) -> str:
    parts = value.split("/")
    if not value or value.startswith(("/", ":")) or ".." in parts:
        raise ValueError(f"{value!r} is not a path inside the repository (relative, with / and no '..')")
    return value.rstrip("/")


RepoPath = Annotated[str, AfterValidator(_repo_path)]
PositiveInt = Annotated[StrictInt, Field(gt=0)]
TimeoutSecs = Annotated[StrictInt, Field(gt=0, le=MAX_TIMEOUT_SECS)]


class Environment(BaseModel):
    """Setup run once per slot on the pinned commit; its result is committed as every attempt's base (extension).

    Or a container image the attempt's commands run in (``image`` or ``dockerfile``; docs/environments.md).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    setup: list[CommandField] = Field(
        default_factory=list, description="Commands run in order in the checkout (required without an image)."
    )
    timeout_secs: TimeoutSecs = Field(
        default=DEFAULT_ENVIRONMENT_TIMEOUT_SECS, description="Limit for each setup command."
    )
    cache_key: str | None = Field(
        default=None, description="Opt in to reusing the result across runs; change it to force a fresh setup."
    )
    cache_files: list[RepoPath] | None = Field(
        default=None,
        description="Files or directories setup depends on (lock files, manifests): their content at the pinned "
        "commit is part of the cache key. Default: every tracked file outside the suite's own directory.",
    )
    # --- container environments (docs/environments.md) ---
    image: Annotated[str, StringConstraints(pattern=r"^[^\s-]\S*$", max_length=500)] | None = Field(
        default=None,
        description="A container image the attempt's commands run in, pulled when absent (with a dockerfile too: "
        "the image --force-build builds instead).",
    )
    dockerfile: RepoPath | None = Field(
        default=None, description="A Dockerfile (relative to the suite file) built once per run into that image."
    )
    context: RepoPath | None = Field(
        default=None, description="The build context of dockerfile (relative to the suite file); default: its dir."
    )
    workdir: Annotated[str, StringConstraints(pattern=r"^/[^\s:]*$", max_length=500)] = Field(
        default="/app", description="Where the attempt's worktree is mounted in the container (its current dir)."
    )
    user: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]+$", max_length=100)] | None = Field(
        default=None,
        description='The container user: default a non-root uid worktrial picks; "image": the image\'s USER; '
        'else a user or uid[:gid] ("root" to run as root).',
    )
    network: Literal["on", "off"] | None = Field(
        default=None, description="The container's network; default: the run's --network."
    )
    cpus: Annotated[float, Field(gt=0, le=1024)] | None = Field(default=None, description="CPU limit (--cpus).")
    memory_mb: Annotated[StrictInt, Field(gt=0)] | None = Field(default=None, description="Memory limit in MiB.")
    build_timeout_secs: TimeoutSecs = Field(default=DEFAULT_ENVIRONMENT_TIMEOUT_SECS, description="Image build limit.")
    seed_workdir: bool = Field(
        default=False,
        description="Copy what the image holds at workdir into the worktree before the agent starts (Harbor tasks "
        "keep their files in the image).",
    )
    verifier_tests: RepoPath | None = Field(
        default=None,
        description="A directory of the suite put at /tests for verification only, with a fresh /logs/verifier "
        "whose reward.txt (or reward.json) decides the verdict: 1 passes (Harbor's convention).",
    )
    harbor: HarborRuntime | None = Field(
        default=None, description="A Harbor task's task.toml settings beyond these fields (set by the task loader)."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Environment:
        container = self.image is not None or self.dockerfile is not None
        if container and self.setup:
            raise ValueError('"setup" with a container image is not supported: put the setup steps in the Dockerfile')
        if container and (self.cache_key is not None or self.cache_files is not None):
            raise ValueError('"cache_key" and "cache_files" belong to "setup"; an image is cached by its digest')
        if not container and not self.setup:
            raise ValueError('an environment needs "setup" commands, an "image" or a "dockerfile"')
        if not container and (self.context is not None or self.verifier_tests is not None):
            raise ValueError('"context" and "verifier_tests" need a container "image" or "dockerfile"')
        return self

    @property
    def container(self) -> bool:
        """Whether the attempt's commands run in a container of this environment's image."""
        return self.image is not None or self.dockerfile is not None


class WorkspacePin(BaseModel):
    """Pins a suite (or one task) to a repository and commit (extension)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    repo: str | None = Field(default=None, description="Path (relative to the suite file) or git URL.")
    ref: str | None = Field(default=None, description="Commit, tag or branch to use as the base.")


VerifyIn = Literal["fresh", "worktree"]
OnTimeout = Literal["fail", "verify"]


class Task(BaseModel):
    """One task of a suite: a prompt for the agent and the commands that decide whether it passed."""

    model_config = ConfigDict(extra="allow")

    id: NonEmptyId = Field(description="Unique, non-empty task id.")
    name: str | None = Field(default=None, description="Human name of the task.")
    category: Category = Field(default="capability", description="capability or regression.")
    prompt: Annotated[str, StringConstraints(pattern=r"\S")] = Field(description="Instruction for the agent.")
    timeout_secs: TimeoutSecs = Field(default=DEFAULT_TIMEOUT_SECS, description="Agent wall-clock limit.")
    verify_commands: list[CommandField] = Field(
        min_length=1, description="All must exit 0 for a claimed success to pass."
    )
    verify_timeout_secs: TimeoutSecs = Field(
        default=DEFAULT_VERIFY_TIMEOUT_SECS, description="Limit for each verify command (extension)."
    )
    solution: list[CommandField] | None = Field(
        default=None, description="Reference solution run by the oracle agent (extension)."
    )
    setup_commands: list[CommandField] = Field(
        default_factory=list, description="Run in the worktree before the agent (extension)."
    )
    environment: Environment | None = Field(
        default=None, description="Replaces the suite's environment for this task (extension)."
    )
    workspace: WorkspacePin | None = Field(
        default=None, description="Runs this task at its own repository and commit (extension)."
    )
    cluster: Annotated[str, StringConstraints(pattern=r"\S", max_length=200)] | None = Field(
        default=None,
        description="Tasks that share a cluster (a source repository, a task family) are not independent: errors "
        "are then computed over clusters (extension).",
    )
    verify_in: VerifyIn | None = Field(
        default=None,
        description="fresh (default): verify on the agent's files with the harness's git metadata and without "
        "ignored untracked files; worktree: on the agent's tree as it left it, git metadata included (weaker; for "
        "checks that need build outputs the patch does not carry) (extension).",
    )
    on_timeout: OnTimeout | None = Field(
        default=None,
        description="fail (default): a timed-out attempt is not verified; verify: the verifier runs on what the "
        "agent left and the record says whether it had solved the task (the outcome stays timeout) (extension).",
    )

    @property
    def display_name(self) -> str:
        return self.name or self.id


class Suite(BaseModel):
    """An eval suite: tasks, each run ``attempts`` times."""

    model_config = ConfigDict(extra="allow")

    id: NonEmptyId
    name: str | None = None
    attempts: Annotated[StrictInt, Field(gt=0, le=MAX_ATTEMPTS)] = Field(default=1, description="Attempts per task.")
    tasks: list[Task] = Field(min_length=1)
    workspace: WorkspacePin | None = None
    files: list[str] = Field(
        default_factory=list, description="Globs (relative to the suite file) of files that belong to the suite."
    )
    environment: Environment | None = Field(default=None, description="Setup run once per slot (extension).")
    verify_in: VerifyIn = Field(default="fresh", description="Where every task verifies, unless it says (extension).")
    on_timeout: OnTimeout = Field(
        default="fail", description="What a timeout means for every task, unless it says (extension)."
    )

    @model_validator(mode="after")
    def _tasks_inherit(self) -> Suite:
        for task in self.tasks:
            if task.verify_in is None:
                task.verify_in = self.verify_in
            if task.on_timeout is None:
                task.on_timeout = self.on_timeout
        return self

    @property
    def display_name(self) -> str:
        return self.name or self.id

    def environment_for(self, task: Task) -> Environment | None:
        return task.environment if task.environment is not None else self.environment

    def workspace_for(self, task: Task) -> WorkspacePin | None:
        return task.workspace if task.workspace is not None else self.workspace


@dataclass(frozen=True)
class LoadedSuite:
    """A validated suite with the identity of the exact file it came from and of every file it declares."""

    suite: Suite
    path: Path
    sha256: str
    warnings: Sequence[str] = field(default_factory=tuple)
    files: tuple[BundleFile, ...] = ()
    bundle_sha256: str = ""

    @property
    def digest(self) -> str:
        """The bundle digest (the suite file's own when it declares no files): what trust and resume compare."""
        return self.bundle_sha256 or self.sha256

    @property
    def suite_dir(self) -> Path:
        return self.path.resolve().parent


def json_path(loc: Sequence[int | str]) -> str:
    out = "$"
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


_FRIENDLY = {
    "missing": "required field is missing",
    "int_type": "must be an integer",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "model_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
}


def _describe(err: Any) -> str:
    kind = err["type"]
    if kind in _FRIENDLY:
        return str(_FRIENDLY[kind])
    if kind == "greater_than":
        return f"must be a positive integer (got {json.dumps(err.get('input'))})"
    if kind == "less_than_equal" and err["loc"] == ("attempts",):
        return f"must be at most {MAX_ATTEMPTS} per task; got {json.dumps(err.get('input'))}"
    if kind == "less_than_equal" and "timeout" in str(err["loc"][-1]):
        return f"must be at most {MAX_TIMEOUT_SECS} seconds (7 days); got {json.dumps(err.get('input'))}"
    if kind == "too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        return "must not be empty"
    if kind == "extra_forbidden":
        return "unknown field"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def load_suite(path: str | Path) -> LoadedSuite:
    """Read, hash and validate a suite file; every problem is a SuiteError naming file and JSON path."""
    p = Path(path)
    if p.is_dir():  # a Harbor task directory, or a directory of them
        from worktrial.model.harbor import load_harbor  # harbor builds on this module

        return load_harbor(p)
    try:
        data = read_input(p, MAX_SUITE_BYTES)
    except InputFileError as exc:
        raise SuiteError(f"{p}: {exc.problem}; a suite is a JSON file") from None
    except FileNotFoundError:
        raise SuiteError(f"{p}: suite file not found") from None
    except IsADirectoryError:
        raise SuiteError(f"{p}: is a directory, expected a suite JSON file") from None
    except OSError as exc:
        raise SuiteError(f"{p}: cannot read suite file: {exc.strerror}") from None
    sha = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SuiteError(f"{p}: suite file is not UTF-8 text") from None
    try:
        raw = loads_limited(text, allow_nul=False)
    except JsonLimitError as exc:
        raise SuiteError(f"{p}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    suite = parse_suite(raw, source=str(p))
    files = collect_bundle(p, suite.files, str(p))
    return LoadedSuite(
        suite=suite,
        path=p,
        sha256=sha,
        warnings=_warnings(raw),
        files=files,
        bundle_sha256=bundle_digest(sha, files),
    )


def parse_suite(raw: Any, source: str = "<suite>") -> Suite:
    """Validate an already-parsed suite object."""
    if not isinstance(raw, dict):
        raise SuiteError(f"{source}: $: the top level must be a JSON object with an id and tasks")
    try:
        check_limits(raw, allow_nul=False)
    except JsonLimitError as exc:
        raise SuiteError(f"{source}: {exc}") from None
    try:
        suite = Suite.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        lines = [f"{source}: {json_path(e['loc'])}: {_describe(e)}" for e in errors[:6]]
        if len(errors) > 6:
            lines.append(f"... and {len(errors) - 6} more problems")
        raise SuiteError("\n".join(lines)) from None
    seen: dict[str, int] = {}
    for i, task in enumerate(suite.tasks):
        if task.id in seen:
            raise SuiteError(
                f"{source}: $.tasks[{i}].id: duplicate task id {task.id!r} (first used at $.tasks[{seen[task.id]}])"
            )
        seen[task.id] = i
    return suite


def _warnings(raw: dict[str, Any]) -> list[str]:
    """Unknown fields are accepted (newer or older harness extensions) but worth a note."""
    known_suite = set(Suite.model_fields)
    known_task = set(Task.model_fields)
    out = [f"$.{k}: unknown field, ignored" for k in raw if k not in known_suite]
    for i, task in enumerate(raw.get("tasks") or []):
        if isinstance(task, dict):
            out += [f"$.tasks[{i}].{k}: unknown field, ignored" for k in task if k not in known_task]
    return out


def suite_json_schema() -> dict[str, Any]:
    """JSON Schema of the suite format, generated from the validating models."""
    schema = Suite.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "worktrial eval suite"
    return schema
