"""The suite file's digest and the bundle digest (file + declared files) never share a name in what users read."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.conftest import SuiteWriter, task
from worktrial.analysis.leaderboard import Contender, build_leaderboard
from worktrial.model.envelope import Envelope
from worktrial.render.leaderboard_markdown import render_leaderboard_markdown

Cli = Callable[..., Result]


@pytest.mark.slow
def test_file_and_bundle_digests_are_named_apart_everywhere(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "expected.txt").write_text("done\n")
    suite = write_suite([task("t1")], files=["hidden/**"])
    envelopes = []
    for _ in range(2):
        result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "-q", "--format", "json"], repo)
        assert result.exit_code == 0, result.output
        envelopes.append(Envelope.model_validate(json.loads(result.stdout)))
    first, second = envelopes
    file, bundle = first.suite_sha256, first.bundle_digest
    assert file != bundle
    outputs = {}

    outputs["report"] = cli(["report", first.run.id, "--format", "markdown"], cwd=repo).stdout
    assert (
        f"- suite file sha256: `{file[:16]}…` · suite bundle sha256 (with 1 declared file): `{bundle[:16]}…`"
        in outputs["report"]
    )
    outputs["show"] = cli(["show", first.run.id], cwd=repo).stdout
    show = " ".join(outputs["show"].split())
    assert f"suite file sha256 {file[:16]}…" in show
    assert f"suite bundle sha256 {bundle[:16]}… (with 1 declared file)" in show
    page = tmp_path / "view.html"
    assert cli(["view", first.run.id, second.run.id, "--output", str(page)], cwd=repo).exit_code == 0
    outputs["view"] = page.read_text()
    assert f"<dt>suite file sha256</dt><dd>{file}</dd>" in outputs["view"]
    assert f"<dt>suite bundle sha256</dt><dd>{bundle} (1 declared file)</dd>" in outputs["view"]
    outputs["compare"] = cli(["compare", first.run.id, second.run.id], cwd=repo).stdout
    assert "| suite · bundle sha256 |" in outputs["compare"] and f"`{bundle[:12]}`" in outputs["compare"]
    board = build_leaderboard([Contender(e.run.id, None, "complete", e) for e in envelopes])
    outputs["leaderboard"] = render_leaderboard_markdown(board)
    assert f"suite bundle sha256 `{bundle[:16]}…`" in outputs["leaderboard"]
    for name, text in outputs.items():
        assert "suite sha256" not in " ".join(text.split()), name
