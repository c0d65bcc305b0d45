"""The run record keeps the run's config once: a run.json written before that (the config's fields also flat
beside it, or no config at all) is read through one validator, and reports the same envelope."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import task
from worktrial.engine.run import RunOptions, frozen_config, measured_request
from worktrial.model.envelope import Envelope
from worktrial.model.run_config import RunConfig, SandboxRequest, TimeoutMultipliers, flag_of
from worktrial.model.suite import load_suite
from worktrial.state import signing
from worktrial.state.history import envelope_from_records
from worktrial.state.store import RunMeta, RunStore

MAIN_RUN = Path(__file__).parent / "data" / "main-run-90acf4e"
"""A smoke-suite run of the oracle (2 attempts, 2 jobs) stored by worktrial at commit 90acf4e, with its key."""
RUN_ID = "20261203T173317Z-2cbad1"


def _stored_run(root: Path) -> RunStore:
    run_dir = root / ".worktrial" / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    for name in ("run.json", "run.json.sig", "attempts.jsonl"):
        shutil.copyfile(MAIN_RUN / name, run_dir / name)
    key = signing.key_path(RUN_ID)
    key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key.write_text((MAIN_RUN / "run.key").read_text())
    key.chmod(0o600)
    return RunStore.open(root, RUN_ID)


def test_a_run_stored_with_flat_copies_of_its_config_reads_and_reports_as_it_did(tmp_path: Path) -> None:
    store = _stored_run(tmp_path)
    meta = store.meta()  # its signature still holds: the file is read as written
    assert meta.config.agent == "oracle" and meta.config.attempts == 2 and meta.config.k == 2
    assert not meta.lifted
    dumped = json.loads(meta.model_dump_json())
    assert not {"agent", "model", "attempts", "k", "label", "artifacts"} & set(dumped), "the config is kept once"
    rebuilt = envelope_from_records(meta, store.records())
    stored = Envelope.model_validate_json((MAIN_RUN / "envelope.json").read_text())
    assert rebuilt.report == stored.report
    mine, theirs = rebuilt.run.model_dump(), stored.run.model_dump()
    for volatile in ("finished_at", "host"):
        mine.pop(volatile), theirs.pop(volatile)
    assert mine == theirs
    assert (rebuilt.agent, rebuilt.model, rebuilt.provider) == (stored.agent, stored.model, stored.provider)


def test_a_run_stored_before_the_config_existed_is_lifted_into_one() -> None:
    raw = json.loads((MAIN_RUN / "run.json").read_text())
    del raw["config"]
    raw |= {"label": "old", "verify_always": True, "selection": {"tasks": ["e*"], "limit": 1, "suite_tasks": 5}}
    meta = RunMeta.model_validate(raw)
    assert meta.lifted
    assert meta.config == RunConfig(
        agent="oracle", attempts=2, k=2, label="old", verify_always=True, tasks=("e*",), limit=1, sandbox=None
    )
    assert envelope_from_records(meta, []).run.grace_secs is None  # such a run recorded none


def test_every_measured_field_names_its_flag() -> None:
    for model in (RunConfig, SandboxRequest):
        for name in model.model_fields:
            assert flag_of(model, name).startswith(("--", "artifacts")), f"{model.__name__}.{name}"


def test_options_become_config_fields_in_one_place(write_suite) -> None:
    loaded = load_suite(write_suite([task("t")], attempts=3))
    options = RunOptions(
        agent="command",
        agent_cmd="true",
        base_url="https://user:secret@example.invalid/v1?key=1",
        agent_settings={"max_turns": 5},
        pass_env=("DB_*",),
        k=2,
        verify_always=True,
        artifacts=False,
        label="l",
        tasks=("t*",),
        limit=1,
        grace_secs=1.5,
        max_cost_per_attempt=0.5,
        force_build=True,
        timeout_multipliers=TimeoutMultipliers(all=2.0),
        trajectories=True,
        verifier_room="fresh",
        reuse="20260101T120000Z-1a2b3c",
    )
    given = measured_request(options)
    assert set(given) == set(RunConfig.model_fields) - {"model", "attempts", "categories", "sandbox"}
    assert given["base_url"] == "https://example.invalid/v1"  # never the credentials
    config = frozen_config(options, loaded)
    assert config.attempts == 3 and config.k == 2 and config.agent == "command" and not config.artifacts
    assert measured_request(RunOptions()) == {}
