"""A stored run written as a Harbor job directory (``worktrial export RUN --format harbor``), with the
``metadata.yaml`` the Terminal-Bench 2.0 leaderboard asks for, so a worktrial run of TB 2.0 can be submitted.

The layout and field names follow Harbor's models (``JobConfig``, ``JobResult``, ``TrialConfig``, ``TrialResult``,
``VerifierResult``; Harbor 0.26): ``OUT/metadata.yaml`` and ``OUT/<job>/{config.json,result.json}`` with one trial
directory per attempt, ``<task>__<attempt id>/{config.json,result.json,agent/,verifier/}``. The leaderboard's rules
are checked first: every task has at least five trials, no timeout multiplier and no resource override.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worktrial.errors import BadInputError
from worktrial.model.envelope import Envelope
from worktrial.model.records import AttemptRecord
from worktrial.model.run_config import RunConfig
from worktrial.state.export.source import ExportOptions, ExportSource, prepare_output

MIN_TRIALS_PER_TASK = 5
"""The leaderboard's rule: each task evaluated with at least five trials (Harbor's ``-k 5``)."""
_NAMESPACE = uuid.UUID("6f1f5a52-8d0e-4c59-9f0b-3c0d2b7a9e11")
"""Trial and job ids are derived from the run id, so exporting a run twice writes the same ids."""


@dataclass(frozen=True)
class LeaderboardModel:
    model_name: str
    model_provider: str
    model_display_name: str
    model_org_display_name: str


@dataclass(frozen=True)
class LeaderboardMetadata:
    """The submission's ``metadata.yaml``: who made the agent, and which models it used."""

    agent_url: str
    agent_display_name: str
    agent_org_display_name: str
    models: tuple[LeaderboardModel, ...] = ()

    def yaml(self) -> str:
        lines = [f"agent_url: {_yaml_str(self.agent_url)}"]
        lines.append(f"agent_display_name: {_yaml_str(self.agent_display_name)}")
        lines.append(f"agent_org_display_name: {_yaml_str(self.agent_org_display_name)}")
        lines.append("models:" if self.models else "models: []")
        for m in self.models:
            lines.append(f"  - model_name: {_yaml_str(m.model_name)}")
            lines.append(f"    model_provider: {_yaml_str(m.model_provider)}")
            lines.append(f"    model_display_name: {_yaml_str(m.model_display_name)}")
            lines.append(f"    model_org_display_name: {_yaml_str(m.model_org_display_name)}")
        return "\n".join(lines) + "\n"


def _yaml_str(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    return json.dumps(text, ensure_ascii=False)


def leaderboard_problems(envelope: Envelope, config: RunConfig | None) -> list[str]:
    """Why this run cannot be submitted to the Terminal-Bench leaderboard (empty when it can)."""
    problems = []
    short = sorted(t.task_id for t in envelope.report.tasks if t.total_runs < MIN_TRIALS_PER_TASK)
    if short:
        problems.append(
            f"{len(short)} task(s) have fewer than {MIN_TRIALS_PER_TASK} trials (first: {short[0]}); run with "
            f"--attempts {MIN_TRIALS_PER_TASK}"
        )
    if not envelope.run.complete:
        problems.append("the run is not complete; finish it with worktrial resume")
    if config is not None:
        if not config.timeout_multipliers.neutral:
            problems.append("it ran with a timeout multiplier; the leaderboard needs every task's own limits")
        sandbox = config.sandbox
        if sandbox is not None and (sandbox.max_memory is not None or sandbox.max_procs is not None):
            problems.append("it ran with --max-memory or --max-procs (resource overrides)")
    return problems


def export_harbor(source: ExportSource, out: Path, options: ExportOptions) -> list[str]:
    """Write the run as a Harbor job directory under ``out`` (and ``metadata.yaml`` when the options give its
    fields); the lines to print."""
    envelope, config = source.envelope, source.config
    if source.run_dir is None:
        raise BadInputError(
            "--format harbor exports a stored run (its logs are in the run store), not an envelope file"
        )
    problems = leaderboard_problems(envelope, config)
    if problems and not options.unchecked:
        raise BadInputError(
            f"run {envelope.run.id} cannot go to the Terminal-Bench leaderboard: {'; '.join(problems)} (pass "
            "--unchecked to write the directory anyway, not as a submission)"
        )
    agent = envelope.agent.get("name") if isinstance(envelope.agent, dict) else None
    agent_name = str(agent or (config.agent if config else "worktrial"))
    metadata = _metadata(envelope, agent_name, options)
    if metadata is None and not options.unchecked:
        raise BadInputError("--agent-url and --agent-org are needed for the leaderboard's metadata.yaml")
    prepare_output(out)
    job_name = f"worktrial-{envelope.run.id}"
    job_dir = out / job_name
    job_dir.mkdir()
    if metadata is not None:
        (out / "metadata.yaml").write_text(metadata.yaml())
    multipliers = config.timeout_multipliers if config is not None else None
    job_config = _job_config(job_name, out, envelope, agent_name, multipliers)
    trials = [
        _write_trial(job_dir, source, record, agent_name, job_config)
        for task in envelope.report.tasks
        for record in task.attempts
    ]
    (job_dir / "config.json").write_text(json.dumps(job_config, indent=2) + "\n")
    result = _job_result(envelope, trials, agent_name, envelope.model)
    (job_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [f"warning: not a leaderboard submission: {problem}" for problem in problems]
    lines.append(f"{len(trials)} trial(s) written to {job_dir}")
    if metadata is None:
        lines.append("no metadata.yaml: give --agent-url and --agent-org for a submission")
    return lines


def _metadata(envelope: Envelope, agent: str, options: ExportOptions) -> LeaderboardMetadata | None:
    if not (options.agent_url and options.agent_org):
        return None
    models: tuple[LeaderboardModel, ...] = ()
    if envelope.model is not None:
        provider = envelope.provider or ""
        models = (
            LeaderboardModel(
                model_name=envelope.model,
                model_provider=provider,
                model_display_name=options.model_display_name or envelope.model,
                model_org_display_name=options.model_org or provider,
            ),
        )
    return LeaderboardMetadata(options.agent_url, options.agent_display_name or agent, options.agent_org, models)


def _multiplier_fields(multipliers: Any) -> dict[str, Any]:
    if multipliers is None:
        return {"timeout_multiplier": 1.0}
    return {
        "timeout_multiplier": multipliers.all,
        "agent_timeout_multiplier": multipliers.agent,
        "verifier_timeout_multiplier": multipliers.verifier,
        "environment_build_timeout_multiplier": multipliers.build,
    }


def _agent_config(agent_name: str, model: str | None) -> dict[str, Any]:
    return {"name": agent_name, "model_name": model}


def _job_config(job_name: str, out: Path, envelope: Envelope, agent: str, multipliers: Any) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "job_name": job_name,
        "jobs_dir": str(out),
        "n_attempts": envelope.run.attempts,
        **_multiplier_fields(multipliers),
        "n_concurrent_trials": envelope.run.jobs,
        "environment": {"type": _environment_type(envelope)},
        "verifier": {},
        "agents": [_agent_config(agent, _model_name(envelope))],
        "datasets": [],
        "tasks": [{"path": f"{envelope.suite_path}/{t.task_id}"} for t in envelope.report.tasks],
    }


def _model_name(envelope: Envelope) -> str | None:
    if envelope.model is None:
        return None
    return f"{envelope.provider}/{envelope.model}" if envelope.provider else envelope.model


def _environment_type(envelope: Envelope) -> str:
    described = json.dumps(envelope.run.host).lower()
    return "docker" if "docker" in described and "podman" not in described else "podman"


def _trial_id(run_id: str, record: AttemptRecord) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"{run_id}/{record.task_id}/{record.attempt}")


def _rewards(record: AttemptRecord) -> dict[str, float] | None:
    if record.rewards:
        return dict(record.rewards)
    if record.reward is not None:
        return {"reward": record.reward}
    if record.verified is not None:
        return {"reward": 1.0 if record.outcome == "pass" else 0.0}
    return None


def _write_trial(
    job_dir: Path, source: ExportSource, record: AttemptRecord, agent: str, job_config: dict[str, Any]
) -> dict[str, Any]:
    envelope = source.envelope
    trial_id = _trial_id(envelope.run.id, record)
    trial_name = f"{record.task_id}__{trial_id.hex[:7]}"
    trial_dir = job_dir / trial_name
    (trial_dir / "agent").mkdir(parents=True)
    (trial_dir / "verifier").mkdir()
    task_path = f"{envelope.suite_path}/{record.task_id}"
    trial_config = {
        "schema_version": 1,
        "task": {"path": task_path},
        "trial_name": trial_name,
        "trials_dir": str(job_dir),
        **{k: v for k, v in job_config.items() if k.endswith("multiplier")},
        "agent": job_config["agents"][0],
        "environment": job_config["environment"],
        "verifier": {},
        "job_id": str(uuid.uuid5(_NAMESPACE, envelope.run.id)),
    }
    (trial_dir / "config.json").write_text(json.dumps(trial_config, indent=2) + "\n")
    artifacts = source.artifacts.get((record.task_id, record.attempt))
    if (trajectory := source.trajectory_files.get((record.task_id, record.attempt))) is not None:
        (trial_dir / "agent" / "trajectory.json").write_bytes(trajectory)  # ATIF, where Harbor's agents keep it
    if artifacts is not None:
        if artifacts.agent_stdout is not None:
            (trial_dir / "agent" / "stdout.txt").write_text(artifacts.agent_stdout.text)
        if artifacts.agent_stderr is not None:
            (trial_dir / "agent" / "stderr.txt").write_text(artifacts.agent_stderr.text)
        verify = "\n".join(c.output_tail for c in artifacts.commands if c.phase == "verify")
        if verify:
            (trial_dir / "verifier" / "test-stdout.txt").write_text(verify)
    rewards = _rewards(record)
    if rewards is not None:
        if set(rewards) == {"reward"}:
            (trial_dir / "verifier" / "reward.txt").write_text(f"{rewards['reward']:g}\n")
        else:
            (trial_dir / "verifier" / "reward.json").write_text(json.dumps(rewards) + "\n")
    model = _model_name(envelope)
    provider, _, name = (model or "").partition("/")
    result: dict[str, Any] = {
        "schema_version": 1,
        "id": str(trial_id),
        "task_name": record.task_id,
        "trial_name": trial_name,
        "trial_uri": trial_dir.resolve().as_uri(),
        "task_id": {"path": task_path},
        "source": envelope.report.suite_id,
        "task_checksum": _task_checksum(envelope, record.task_id),
        "config": trial_config,
        "agent_info": {
            "name": agent,
            "version": str(envelope.agent.get("version") or envelope.harness_version),
            "model_info": {"name": name or provider, "provider": provider if name else None} if model else None,
        },
        "agent_result": {
            "n_input_tokens": record.tokens.input,
            "n_cache_tokens": record.tokens.cached_input,
            "n_output_tokens": record.tokens.output,
            "cost_usd": record.cost_usd,
        },
        "verifier_result": {"rewards": rewards} if rewards is not None else None,
        "exception_info": _exception(record, envelope),
    }
    if record.verifier_room in ("shared", "separate"):  # Harbor's modes; worktrial's fresh room has no name there
        result["verifier_environment_mode"] = record.verifier_room
    (trial_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _task_checksum(envelope: Envelope, task_id: str) -> str:
    return hashlib.sha256(f"{envelope.suite_bundle_sha256 or envelope.suite_sha256}/{task_id}".encode()).hexdigest()


def _exception(record: AttemptRecord, envelope: Envelope) -> dict[str, Any] | None:
    if record.outcome not in ("error", "timeout"):
        return None
    kind = "AgentTimeoutError" if record.outcome == "timeout" else f"WorktrialError:{record.error_category}"
    return {
        "exception_type": kind,
        "exception_message": record.reason or record.outcome,
        "exception_traceback": "",
        "occurred_at": envelope.run.finished_at or envelope.run.started_at,
    }


def _job_result(envelope: Envelope, trials: list[dict[str, Any]], agent: str, model: str | None) -> dict[str, Any]:
    key = f"{agent}__{model or 'adhoc'}__{envelope.report.suite_id}"
    rewards: dict[str, dict[str, list[str]]] = {}
    for trial in trials:
        for name, value in ((trial["verifier_result"] or {}).get("rewards") or {}).items():
            rewards.setdefault(name, {}).setdefault(f"{value:g}", []).append(trial["trial_name"])
    errors = [t for t in trials if t["exception_info"] is not None]
    values = [r["reward"] for t in trials if (r := (t["verifier_result"] or {}).get("rewards")) and "reward" in r]
    stats = {
        "n_completed_trials": len(trials),
        "n_errored_trials": len(errors),
        "evals": {
            key: {
                "n_trials": len(trials),
                "n_errors": len(errors),
                "metrics": [{"mean": sum(values) / len(values)}] if values else [],
                "pass_at_k": {
                    k: v for k, v in envelope.report.overall.curves.pass_at.items() if k != "1" and v is not None
                },
                "reward_stats": rewards,
                "exception_stats": _exception_stats(errors),
            }
        },
    }
    return {
        "schema_version": 1,
        "id": str(uuid.uuid5(_NAMESPACE, envelope.run.id)),
        "started_at": envelope.run.started_at,
        "finished_at": envelope.run.finished_at,
        "n_total_trials": len(trials),
        "stats": stats,
        "trial_results": [],
    }


def _exception_stats(errors: list[dict[str, Any]]) -> dict[str, list[str]]:
    stats: dict[str, list[str]] = {}
    for trial in errors:
        stats.setdefault(trial["exception_info"]["exception_type"], []).append(trial["trial_name"])
    return stats
