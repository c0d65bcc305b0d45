"""mini-swe-agent: ``mini -y --exit-immediately -t PROMPT -o TRAJ.json``.

The trajectory file's ``info`` has ``exit_status`` ("Submitted" when the agent finished the task on
its own; otherwise the name of what stopped it, e.g. "LimitsExceeded") and
``model_stats{instance_cost, api_calls}``. Tokens are not summarised by mini, so they stay unknown.
"""

from __future__ import annotations

from pathlib import Path

from worktrial.agents.presets.base import Invocation, PresetSpec, scratch_dir
from worktrial.agents.presets.parsing import (
    ExitInfo,
    Verdict,
    as_cost,
    as_dict,
    as_int,
    as_str,
    exit_reason,
    read_json_file,
)
from worktrial.model.records import Usage

TRAJECTORY = "mini-trajectory.json"
SUCCESS_STATUS = "Submitted"


class MiniTrajectoryParser:
    label = "mini-swe-agent"

    def feed(self, chunk: bytes) -> None:
        return None

    def finish(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage()
        try:
            trajectory = read_json_file(exit_info.scratch / TRAJECTORY, self.label, usage.notes)
            info = as_dict(as_dict(trajectory).get("info"))
            stats = as_dict(info.get("model_stats"))
            usage.cost_usd = as_cost(stats.get("instance_cost"))
            usage.turns = as_int(stats.get("api_calls"))
            status = as_str(info.get("exit_status"))
        except Exception as exc:  # never crash the attempt over a trajectory file
            usage = Usage(notes=[f"mini-swe-agent: trajectory unreadable ({type(exc).__name__}); usage unknown"])
            trajectory, status = None, None
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        if status == SUCCESS_STATUS:
            return Verdict(claimed=True, usage=usage)
        if status:
            usage.error_counts[status] = 1
            return Verdict(claimed=False, usage=usage, reason=f"mini-swe-agent exit status {status}")
        if trajectory is not None:
            usage.notes.append("mini-swe-agent: trajectory has no exit_status")
        if exit_info.returncode == 0:
            return Verdict(claimed=None, usage=usage, reason="mini-swe-agent exited 0 without an exit status")
        if trajectory is None:
            return Verdict(
                claimed=None,
                usage=usage,
                reason=exit_reason("mini-swe-agent", exit_info) + " before writing a trajectory",
                error_category="agent_failed",
            )
        return Verdict(claimed=False, usage=usage, reason=exit_reason("mini-swe-agent", exit_info))


def _argv(inv: Invocation) -> list[str]:
    args = ["-y", "--exit-immediately", "-o", str(inv.scratch / TRAJECTORY)]
    if inv.model:
        args += ["-m", inv.model]
    return [*args, *inv.extra_args, "-t", inv.prompt]


def _env(scratch: Path) -> dict[str, str]:
    return {
        "MSWEA_GLOBAL_CONFIG_DIR": scratch_dir(scratch, "mini-swe-agent"),
        # Skip the first-run setup wizard, which would wait for keyboard input.
        "MSWEA_CONFIGURED": "true",
    }


SPEC = PresetSpec(
    name="mini-swe-agent",
    binary="mini",
    summary="mini-swe-agent (mini -y --exit-immediately, usage from its trajectory)",
    install="pipx install mini-swe-agent   (or: pip install mini-swe-agent)",
    argv=_argv,
    parser=MiniTrajectoryParser,
    env=_env,
    reports=("cost", "turns"),
)
