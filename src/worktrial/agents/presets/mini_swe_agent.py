"""mini-swe-agent: ``mini -y --exit-immediately -t PROMPT -o TRAJ.json``.

The trajectory file's ``info`` has ``exit_status`` ("Submitted" when the agent finished the task on its own;
otherwise the name of what stopped it: "LimitsExceeded", or the class of an exception it died of, such as
litellm's ``AuthenticationError`` or ``BadRequestError``) and ``model_stats{instance_cost, api_calls}``. mini
does not sum tokens, but every model message keeps the provider's response, so tokens are summed from each
message's ``extra.response.usage``. It prices through litellm and reports ``instance_cost`` 0.0 for a model
litellm cannot price; by default it even aborts on such a model, so the preset sets ``MSWEA_COST_TRACKING=
ignore_errors`` (unless you set it) and worktrial prices the tokens from its own table, or leaves the cost unknown.
mini has no ``--version``: the version is read from the package metadata by the Python its script runs on.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worktrial.agents.presets.base import (
    Invocation,
    PresetSpec,
    litellm_base_url,
    litellm_provider,
    litellm_upstream,
    scratch_dir,
)
from worktrial.agents.presets.carry import ConfigCarry, UserSetup
from worktrial.agents.presets.parsing import (
    ExitInfo,
    Verdict,
    as_cost,
    as_dict,
    as_int,
    as_list,
    as_str,
    exit_reason,
    read_json_file,
)
from worktrial.agents.presets.provider_errors import LITELLM_EXCEPTIONS, classify_litellm, failure
from worktrial.agents.presets.routing import Configured
from worktrial.model.records import ErrorCategory, Tokens, Usage

TRAJECTORY = "mini-trajectory.json"
SUCCESS_STATUS = "Submitted"
KEY_HINT = "check the provider's key variable or mini-swe-agent's .env (copied into each attempt)"
SHEBANG_BYTES = 512


def message_tokens(message: dict[str, Any]) -> Tokens | None:
    """The provider's usage of one model message (OpenAI shape, as litellm normalises it): input with cached."""
    usage = as_dict(as_dict(as_dict(message.get("extra")).get("response")).get("usage"))
    if not usage:
        return None
    return Tokens(
        input=as_int(usage.get("prompt_tokens")),
        output=as_int(usage.get("completion_tokens")),
        cached_input=as_int(as_dict(usage.get("prompt_tokens_details")).get("cached_tokens")),
        reasoning=as_int(as_dict(usage.get("completion_tokens_details")).get("reasoning_tokens")),
    )


class MiniTrajectoryParser:
    label = "mini-swe-agent"

    def __init__(self) -> None:
        self.model: str | None = None

    def feed(self, chunk: bytes) -> None:
        return None

    def finish(self, exit_info: ExitInfo) -> Verdict:
        verdict = self._finish(exit_info)
        verdict.model = self.model
        return verdict

    def _read(self, trajectory: Any, usage: Usage) -> tuple[str | None, str | None]:
        """Fill usage from the trajectory; the exit status and the message of the exception that ended the run."""
        info = as_dict(as_dict(trajectory).get("info"))
        stats = as_dict(info.get("model_stats"))
        usage.cost_usd = as_cost(stats.get("instance_cost"))
        usage.turns = as_int(stats.get("api_calls"))
        model = as_dict(as_dict(info.get("config")).get("model"))
        self.model = as_str(model.get("model_name"))
        messages = [as_dict(m) for m in as_list(as_dict(trajectory).get("messages"))]
        tokens = [t for t in (message_tokens(m) for m in messages) if t is not None]
        if tokens:
            total = tokens[0]
            for more in tokens[1:]:
                total = total.add(more)
            usage.tokens = total
            if usage.turns is not None and len(tokens) != usage.turns:
                usage.notes.append(f"mini-swe-agent: {len(tokens)} responses with usage for {usage.turns} API calls")
        elif usage.turns:
            usage.notes.append("mini-swe-agent: no response usage in the trajectory; tokens unknown")
        last = messages[-1] if messages else {}
        detail = as_str(as_dict(last.get("extra")).get("exception_str")) or as_str(last.get("content"))
        return as_str(info.get("exit_status")), detail

    def _finish(self, exit_info: ExitInfo) -> Verdict:
        usage = Usage()
        try:
            trajectory = read_json_file(exit_info.scratch / TRAJECTORY, self.label, usage.notes)
            status, detail = self._read(trajectory, usage)
        except Exception as exc:  # never crash the attempt over a trajectory file
            usage = Usage(notes=[f"mini-swe-agent: trajectory unreadable ({type(exc).__name__}); usage unknown"])
            trajectory, status, detail = None, None, None
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        if status == SUCCESS_STATUS:
            return Verdict(claimed=True, usage=usage)
        if status in LITELLM_EXCEPTIONS:
            category = classify_litellm(status, detail) or ErrorCategory.PROVIDER_ERROR
            usage.error_counts[category] = usage.error_counts.get(category, 0) + 1
            found = failure(self.label, category, None, f"{status}: {detail or ''}", KEY_HINT)
            fatal = found.fatal or (category == ErrorCategory.PROVIDER_BAD_REQUEST and not usage.turns)
            return Verdict(claimed=None, usage=usage, reason=found.message, error_category=category, fatal=fatal)
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
                error_category=ErrorCategory.AGENT_FAILED,
            )
        return Verdict(claimed=False, usage=usage, reason=exit_reason("mini-swe-agent", exit_info))


def _argv(inv: Invocation) -> list[str]:
    args = ["-y", "--exit-immediately", "-o", str(inv.scratch / TRAJECTORY)]
    if inv.model:
        args += ["-m", inv.model]
    if inv.cost_cap is not None:
        args += ["--cost-limit", f"{inv.cost_cap:g}"]  # its own limit too: it stops between steps
    return [*args, *inv.extra_args, "-t", inv.prompt]


def _env(scratch: Path) -> dict[str, str]:
    return {
        "MSWEA_GLOBAL_CONFIG_DIR": scratch_dir(scratch, "mini-swe-agent"),
        # Skip the first-run setup wizard, which would wait for keyboard input.
        "MSWEA_CONFIGURED": "true",
    }


def _run_env(inv: Invocation, env: Mapping[str, str]) -> dict[str, str]:
    extra = litellm_base_url(inv, env)
    if "MSWEA_COST_TRACKING" not in env:
        # Otherwise mini aborts on a model litellm has no price for; worktrial prices (or leaves unknown) itself.
        extra["MSWEA_COST_TRACKING"] = "ignore_errors"
    return extra


def _setup(setup: UserSetup, env: Mapping[str, str], provider: str | None, model: str | None) -> Configured:
    """The model mini's global .env (or the environment) names with ``MSWEA_MODEL_NAME``: its provider is the
    upstream (``openrouter/...`` reads ``OPENROUTER_API_KEY`` and ``OPENROUTER_API_BASE``)."""
    del setup, provider
    named = model or env.get("MSWEA_MODEL_NAME")
    upstream = litellm_provider(named) if model is None and named else None
    return Configured(
        model=named, upstream=upstream, elsewhere=model is None and named is not None and upstream is None
    )


def version_argv(binary_path: str) -> list[str] | None:
    """mini has no --version: ask the interpreter of its script (a venv or pipx Python) for the package version."""
    try:
        with open(binary_path, "rb") as fh:
            head = fh.read(SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    interpreter = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not interpreter or "python" not in Path(interpreter[-1]).name:
        return None
    code = "import importlib.metadata as m; print('mini-swe-agent', m.version('mini-swe-agent'))"
    return [*interpreter, "-c", code]


SPEC = PresetSpec(
    name="mini-swe-agent",
    binary="mini",
    summary="mini-swe-agent (mini -y --exit-immediately, usage from its trajectory)",
    install="pipx install mini-swe-agent   (or: pip install mini-swe-agent)",
    argv=_argv,
    parser=MiniTrajectoryParser,
    env=_env,
    reports=("tokens", "cost", "turns"),
    version_argv=version_argv,
    price_provider="openai",
    carries=(
        ConfigCarry(
            "MSWEA_GLOBAL_CONFIG_DIR", "mini-swe-agent", ".config/mini-swe-agent", (".env",), env_files=(".env",)
        ),
    ),
    run_env=_run_env,
    base_url="<PROVIDER>_API_BASE (litellm's variable for the route's provider; OPENAI_API_BASE without one)",
    upstream=litellm_upstream,
    setup=_setup,
)
