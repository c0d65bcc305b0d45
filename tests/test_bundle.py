"""Suite bundles: declared files are part of the digest, and resume, audit, compare and trust notice changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import task
from worktrial.errors import SuiteError
from worktrial.model.bundle import copy_bundle
from worktrial.model.suite import load_suite


def _suite(tmp_path: Path, files: list[str], **extra: object) -> Path:
    data = {"id": "b", "files": files, "tasks": [task("t1")], **extra}
    path = tmp_path / "suite.json"
    path.write_text(json.dumps(data))
    return path


def test_no_files_keeps_the_file_digest(tmp_path: Path) -> None:
    loaded = load_suite(_suite(tmp_path, []))
    assert loaded.files == () and loaded.digest == loaded.sha256 == loaded.bundle_sha256


def test_bundle_digest_covers_declared_files_in_canonical_order(tmp_path: Path) -> None:
    (tmp_path / "hidden" / "deep").mkdir(parents=True)
    (tmp_path / "hidden" / "test_b.py").write_text("b\n")
    (tmp_path / "hidden" / "deep" / "test_a.py").write_text("a\n")
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "fix.diff").write_text("diff\n")
    (tmp_path / "notes.txt").write_text("not declared\n")
    loaded = load_suite(_suite(tmp_path, ["patches/*.diff", "hidden/**"]))
    assert [f.name for f in loaded.files] == ["hidden/deep/test_a.py", "hidden/test_b.py", "patches/fix.diff"]
    assert loaded.digest != loaded.sha256
    first = loaded.digest
    # Same content, same digest; an edit to a declared file changes it, an undeclared file does not.
    assert load_suite(tmp_path / "suite.json").digest == first
    (tmp_path / "notes.txt").write_text("changed\n")
    assert load_suite(tmp_path / "suite.json").digest == first
    (tmp_path / "hidden" / "test_b.py").write_text("b2\n")
    assert load_suite(tmp_path / "suite.json").digest != first
    (tmp_path / "hidden" / "test_b.py").write_text("b\n")
    assert load_suite(tmp_path / "suite.json").digest == first
    (tmp_path / "hidden" / "test_c.py").write_text("new\n")
    assert load_suite(tmp_path / "suite.json").digest != first


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("missing/**", "matches no file"),
        ("../outside.txt", "leaves the suite directory"),
        ("/etc/passwd", "must be a relative POSIX glob"),
    ],
)
def test_bad_globs_are_one_clear_error(tmp_path: Path, pattern: str, message: str) -> None:
    with pytest.raises(SuiteError, match=message):
        load_suite(_suite(tmp_path, [pattern]))


def test_symlinked_files_are_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("secret\n")
    (tmp_path / "hidden").mkdir()
    os.symlink(tmp_path / "outside.txt", tmp_path / "hidden" / "link.txt")
    with pytest.raises(SuiteError, match="is a symlink"):
        load_suite(_suite(tmp_path, ["hidden/*"]))


def test_copy_is_exact_read_only_and_refuses_a_later_edit(tmp_path: Path) -> None:
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "t.sh").write_text("echo hi\n")
    os.chmod(tmp_path / "hidden" / "t.sh", 0o755)
    (tmp_path / "undeclared.txt").write_text("x\n")
    loaded = load_suite(_suite(tmp_path, ["hidden/*"]))
    dest = tmp_path / "copy"
    copy_bundle(loaded.path, loaded.files, dest)
    assert (dest / "hidden" / "t.sh").read_text() == "echo hi\n"
    assert os.access(dest / "hidden" / "t.sh", os.X_OK)
    assert not (dest / "undeclared.txt").exists()
    assert oct((dest / "hidden").stat().st_mode & 0o777) == "0o555"
    (tmp_path / "hidden" / "t.sh").write_text("echo changed\n")
    with pytest.raises(SuiteError, match="changed since the suite was loaded"):
        copy_bundle(loaded.path, loaded.files, tmp_path / "copy2")


def _bundled_suite(tmp_path: Path) -> Path:
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "expected.txt").write_text("done\n")
    return _suite(
        tmp_path,
        ["hidden/*"],
        tasks=[task("t1", verify_commands=[{"sh": 'cmp done.txt "$WORKTRIAL_SUITE_DIR/hidden/expected.txt"'}])],
    )


def test_envelope_lists_files_and_audit_notices_a_changed_file(cli, repo: Path, tmp_path: Path) -> None:
    suite = _bundled_suite(tmp_path)
    out = tmp_path / "env.json"
    result = cli(
        ["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json", "--output", str(out)],
        cwd=repo,
    )
    assert result.exit_code == 0, result.output
    envelope = json.loads(out.read_text())
    loaded = load_suite(suite)
    assert envelope["suite_sha256"] == loaded.sha256
    assert envelope["suite_bundle_sha256"] == loaded.digest != loaded.sha256
    assert envelope["suite_files"] == [{"name": "hidden/expected.txt", "sha256": loaded.files[0].sha256, "size": 5}]
    assert envelope["report"]["overall"]["passed_runs"] == 1  # the verify read the hidden file
    assert cli(["audit", str(out), "--suite", str(suite)]).exit_code == 0
    (tmp_path / "hidden" / "expected.txt").write_text("other\n")
    audit = cli(["audit", str(out), "--suite", str(suite)])
    assert audit.exit_code == 1
    assert "suite_bundle_sha256" in audit.stdout and "changed: hidden/expected.txt" in audit.stdout


def test_resume_refuses_when_a_declared_file_changed(cli, repo: Path, tmp_path: Path) -> None:
    suite = _bundled_suite(tmp_path)
    result = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json"], cwd=repo)
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout)["run"]["id"]
    (tmp_path / "hidden" / "expected.txt").write_text("other\n")
    resumed = cli(["resume", run_id], cwd=repo)
    assert resumed.exit_code == 2
    assert "suite bundle digest" in resumed.stderr and "Traceback" not in resumed.output


def test_trust_is_per_bundle(cli, repo: Path, tmp_path: Path) -> None:
    suite = _bundled_suite(tmp_path)
    first = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--trust", "--format", "json"], cwd=repo)
    assert first.exit_code == 0, first.output
    again = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--format", "json"], cwd=repo)
    assert again.exit_code == 0, again.output
    (tmp_path / "hidden" / "expected.txt").write_text("other\n")
    untrusted = cli(["eval", "--suite", str(suite), "--agent", "oracle", "--format", "json"], cwd=repo)
    assert untrusted.exit_code == 2 and "has not been trusted" in untrusted.stderr
