"""Google Gemini CLI: ``gemini --yolo --output-format json --prompt PROMPT``.

The single JSON document has ``stats.models.<model>.tokens{prompt, candidates, cached, thoughts}``
and ``api.totalRequests`` per model, and ``stats.tools{totalCalls, byName}``; ``error`` is present when
the request failed. Documented exit codes: 0 ok, 1 error, 42 input error, 53 turn limit exceeded.
No cost is reported.
"""

from __future__ import annotations

from worktrial.agents.presets.base import Invocation, PresetSpec, scratch_dir
from worktrial.agents.presets.parsing import (
    DocumentParser,
    ExitInfo,
    Verdict,
    as_dict,
    as_int,
    as_str,
    exit_reason,
    plus,
    tokens_from,
)
from worktrial.model.records import Tokens, Usage

TOKEN_FIELDS = {"input": "prompt", "output": "candidates", "cached_input": "cached", "reasoning": "thoughts"}
EXIT_MEANINGS = {1: "general error or API failure", 42: "input error", 53: "turn limit exceeded"}


class GeminiJsonParser(DocumentParser):
    label = "gemini-cli"

    def finish(self, exit_info: ExitInfo) -> Verdict:
        document, problem = self.document()
        usage = Usage()
        if document is None:
            usage.notes.append(problem or "gemini-cli: no output")
            return self._by_exit(exit_info, usage, parsed=False)
        try:
            self._read_stats(as_dict(document.get("stats")), usage)
        except Exception as exc:  # an unexpected shape means unknown usage, not a crash
            usage = Usage(notes=[f"gemini-cli: stats of unexpected shape ({type(exc).__name__}); usage unknown"])
        if problem:
            usage.notes.append(problem)
        error = document.get("error")
        if error is not None and not exit_info.timed_out:
            kind = as_str(as_dict(error).get("type")) or "error"
            usage.error_counts[kind] = usage.error_counts.get(kind, 0) + 1
            return Verdict(claimed=False, usage=usage, reason=f"gemini-cli reported {kind}")
        return self._by_exit(exit_info, usage, parsed=True)

    def _read_stats(self, stats: dict[str, object], usage: Usage) -> None:
        tokens = Tokens()
        requests: int | None = None
        for model_stats in as_dict(stats.get("models")).values():
            model_stats = as_dict(model_stats)
            tokens = tokens.add(tokens_from(as_dict(model_stats.get("tokens")), TOKEN_FIELDS))
            requests = plus(requests, as_int(as_dict(model_stats.get("api")).get("totalRequests")))
        usage.tokens = tokens
        usage.turns = requests
        tools = as_dict(stats.get("tools"))
        for name, by_name in as_dict(tools.get("byName")).items():
            count = as_int(as_dict(by_name).get("count"))
            if isinstance(name, str) and count:
                usage.tool_counts[name] = count
        total = as_int(tools.get("totalCalls"))
        if total is not None and total != sum(usage.tool_counts.values()):
            usage.notes.append(f"gemini-cli: stats.tools.totalCalls={total} differs from byName counts")

    def _by_exit(self, exit_info: ExitInfo, usage: Usage, *, parsed: bool) -> Verdict:
        if exit_info.timed_out:
            return Verdict(claimed=None, usage=usage)
        code = exit_info.returncode
        if code == 0:
            if parsed:
                return Verdict(claimed=True, usage=usage)
            return Verdict(claimed=None, usage=usage, reason="gemini-cli exited 0 without a JSON result")
        meaning = EXIT_MEANINGS.get(code) if code is not None else None
        reason = exit_reason("gemini-cli", exit_info) + (f" ({meaning})" if meaning else "")
        if not parsed and code not in (42, 53):
            return Verdict(claimed=None, usage=usage, reason=reason, error_category="agent_failed")
        return Verdict(claimed=False, usage=usage, reason=reason)


def _argv(inv: Invocation) -> list[str]:
    args = ["--yolo", "--output-format", "json"]
    if inv.model:
        args += ["--model", inv.model]
    return [*args, *inv.extra_args, "--prompt", inv.prompt]


SPEC = PresetSpec(
    name="gemini-cli",
    binary="gemini",
    summary="Google Gemini CLI (gemini --yolo --output-format json)",
    install="npm install -g @google/gemini-cli",
    argv=_argv,
    parser=GeminiJsonParser,
    # GEMINI_CLI_HOME replaces the home directory Gemini CLI keeps its .gemini state under.
    env=lambda scratch: {"GEMINI_CLI_HOME": scratch_dir(scratch, "gemini")},
    reports=("tokens", "turns", "tool calls"),
)
