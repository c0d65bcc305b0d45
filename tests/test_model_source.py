"""The envelope's model: the --model route, else the one model every attempt's agent said it ran."""

from __future__ import annotations

from worktrial.model.records import AttemptRecord
from worktrial.model.run_config import RunConfig
from worktrial.state.history import envelope_from_records
from worktrial.state.store import RunMeta, TaskMeta


def meta(model: str | None) -> RunMeta:
    return RunMeta(
        id="r1",
        started_at="2026-11-30T00:00:00Z",
        suite_path="/s.json",
        suite_display_path="s.json",
        suite_sha256="0" * 64,
        suite_id="s",
        suite_name="s",
        tasks=[TaskMeta(id="t", name="t", category="capability")],
        workspace="/w",
        source_repo="/w",
        base_commit="0" * 40,
        dirty=False,
        config=RunConfig(agent="claude-code", model=model, attempts=2, k=2),
        jobs=1,
    )


def record(n: int, model: str | None) -> AttemptRecord:
    return AttemptRecord(
        task_id="t",
        attempt=n,
        outcome="pass",
        claimed=True,
        verified=True,
        duration_secs=1.0,
        agent_secs=1.0,
        verify_secs=0.0,
        model=model,
    )


def test_route_wins_over_what_agents_report() -> None:
    envelope = envelope_from_records(meta("anthropic/claude-sonnet-4-5"), [record(1, "claude-opus-4-1")])
    assert (envelope.provider, envelope.model, envelope.model_source) == ("anthropic", "claude-sonnet-4-5", "route")


def test_without_a_route_the_model_all_agents_named_is_recorded() -> None:
    envelope = envelope_from_records(meta(None), [record(1, "claude-haiku-4-5"), record(2, "claude-haiku-4-5")])
    assert (envelope.provider, envelope.model, envelope.model_source) == (None, "claude-haiku-4-5", "agent")
    routed = envelope_from_records(meta(None), [record(1, "openrouter/openai/gpt-5.1"), record(2, None)])
    assert (routed.provider, routed.model) == ("openrouter", "openai/gpt-5.1")


def test_disagreeing_or_silent_agents_leave_the_model_unknown() -> None:
    mixed = envelope_from_records(meta(None), [record(1, "a-model"), record(2, "b-model")])
    assert (mixed.provider, mixed.model, mixed.model_source) == (None, None, None)
    silent = envelope_from_records(meta(None), [record(1, None)])
    assert (silent.model, silent.model_source) == (None, None)
