"""Trust on a terminal: the person sees the suite's commands, is asked once per digest and workspace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import task
from worktrial.errors import TrustError
from worktrial.model.suite import load_suite
from worktrial.state.trust import ensure_trusted, is_trusted


def test_interactive_trust_shows_commands_and_is_remembered(repo: Path, write_suite) -> None:
    path = write_suite([task("a", setup_commands=["mkdir pre"], verify_commands=["test -f done.txt"])])
    questions: list[str] = []

    def answer(yes: bool):
        def confirm(question: str) -> bool:
            questions.append(question)
            return yes

        return confirm

    loaded = load_suite(path)
    with pytest.raises(TrustError, match="suite not trusted; nothing was run"):
        ensure_trusted(loaded, repo, assume_yes=False, interactive=True, confirm=answer(False))
    assert not is_trusted(loaded.sha256, repo)
    ensure_trusted(loaded, repo, assume_yes=False, interactive=True, confirm=answer(True))
    assert "[a] setup: mkdir pre" in questions[-1] and "[a] verify: test -f done.txt" in questions[-1]
    assert "[a] solution: sh -c 'echo done > done.txt'" in questions[-1]
    asked = len(questions)
    ensure_trusted(loaded, repo, assume_yes=False, interactive=True, confirm=answer(False))  # remembered
    assert len(questions) == asked
    other = repo.parent / "other-workspace"
    other.mkdir()
    with pytest.raises(TrustError):  # trust is per workspace
        ensure_trusted(loaded, other, assume_yes=False, interactive=False, confirm=answer(True))
    data = json.loads(path.read_text())
    data["tasks"][0]["verify_commands"] = ["true"]  # an edited suite has a new digest and is asked again
    path.write_text(json.dumps(data))
    with pytest.raises(TrustError, match="has not been trusted"):
        ensure_trusted(load_suite(path), repo, assume_yes=False, interactive=False, confirm=answer(True))
