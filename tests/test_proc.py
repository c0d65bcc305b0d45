"""The process layer with real processes: deadlines, tree kills, bounded capture, missing programs."""

from __future__ import annotations

import json
import os
import shlex
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import alive_with_marker
from worktrial.isolation import cgroups, proc
from worktrial.isolation.cgroups import CGROUPS
from worktrial.isolation.proc import run_command
from worktrial.model.commands import to_argv

# The interpreter itself, not `python3`: a pyenv-style shim would add processes that carry the marker too.
PY = shlex.quote(sys.executable)


@pytest.mark.slow
def test_timeout_kills_grandchildren_even_in_new_sessions(tmp_path: Path) -> None:
    marker = f"wt-marker-{uuid.uuid4().hex}"
    script = (
        f"{PY} -c 'import time; time.sleep(300)' {marker}-child & "
        f"setsid {PY} -c 'import time; time.sleep(300)' {marker}-daemon & "
        f"sh -c \"{PY} -c 'import time; time.sleep(300)' {marker}-grandchild &\" ; wait"
    )
    result = proc.run(["/bin/sh", "-c", script], cwd=tmp_path, timeout=1.5)
    assert result.timed_out and result.returncode is None
    assert alive_with_marker(marker) == []


def test_background_leftovers_are_killed_after_normal_exit(tmp_path: Path) -> None:
    marker = f"wt-left-{uuid.uuid4().hex}"
    result = proc.run(
        ["/bin/sh", "-c", f"setsid {PY} -c 'import time; time.sleep(300)' {marker} >/dev/null 2>&1 & echo hi"],
        cwd=tmp_path,
        timeout=30,
    )
    assert result.ok and result.stdout_tail == b"hi\n"
    assert alive_with_marker(marker) == []


def test_daemon_holding_the_pipe_does_not_hang(tmp_path: Path) -> None:
    result = proc.run(["/bin/sh", "-c", "setsid sleep 300 & echo started"], cwd=tmp_path, timeout=30)
    assert result.ok and not result.timed_out  # a hang on the pipe would end in the 30 s timeout instead


def test_missing_executable(tmp_path: Path) -> None:
    result = proc.run(["definitely-not-a-program-xyz", "--flag"], cwd=tmp_path, timeout=5)
    assert result.not_found == "definitely-not-a-program-xyz"
    assert result.describe_failure("verify") == "command not found: definitely-not-a-program-xyz"


def test_missing_executable_inside_shell(tmp_path: Path) -> None:
    result = proc.run(["/bin/sh", "-c", "no-such-tool-abc --x"], cwd=tmp_path, timeout=5)
    assert result.returncode == 127
    assert result.missing_command() == "no-such-tool-abc"


def test_gigantic_output_is_bounded(tmp_path: Path) -> None:
    size = 300 * 1024 * 1024
    result = proc.run(["head", "-c", str(size), "/dev/zero"], cwd=tmp_path, timeout=120, tail_bytes=4096)
    assert result.ok
    assert result.stdout_bytes == size
    assert len(result.stdout_tail) == 4096


def test_non_utf8_output_and_tail(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.buffer.write(b'\\xff\\xfe' * 10 + b'END'); sys.stderr.buffer.write(b'\\x80err')"
    result = proc.run([sys.executable, "-c", code], cwd=tmp_path, timeout=30, tail_bytes=5)
    assert result.ok
    assert result.stdout_tail == b"\xff\xfeEND"
    assert result.stderr_tail == b"\x80err"
    assert result.stdout_bytes == 23


def test_stdin_is_delivered(tmp_path: Path) -> None:
    result = proc.run(["cat"], cwd=tmp_path, timeout=10, stdin=b"the prompt")
    assert result.stdout_tail == b"the prompt"


def test_git_location_variables_do_not_leak(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GIT_DIR", "/somewhere/else")
    result = proc.run(["/bin/sh", "-c", 'printf %s "${GIT_DIR-unset}"'], cwd=tmp_path, timeout=10)
    assert result.stdout_tail == b"unset"


def test_pwd_is_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    """A tool that reads $PWD (OpenCode does) must see the attempt's directory, not the harness's."""
    monkeypatch.setenv("PWD", "/somewhere/else")
    work = tmp_path / "work"
    work.mkdir()
    script = "import os, sys; sys.stdout.write(os.environ.get('PWD', 'unset') + '|' + os.getcwd())"
    result = proc.run([sys.executable, "-c", script], cwd=work, env={"PWD": "/stale"}, timeout=30)
    pwd, cwd = result.stdout_tail.decode().split("|")
    assert pwd == str(work)
    assert os.path.samefile(pwd, cwd)


def test_whitespace_argv_keeps_braces_quotes_and_hash(tmp_path: Path) -> None:
    """Existing suites rely on no-shell splitting: braces, quotes and # are plain argument text."""
    dump = tmp_path / "dump.py"
    dump.write_text("import json, sys\nopen('args.json', 'w').write(json.dumps(sys.argv[1:]))\n")
    command = f'python3 {dump} {{"name":"x","count":3}} #Journal \'a b\' "q" $HOME a|b'
    assert to_argv(command)[2:] == ['{"name":"x","count":3}', "#Journal", "'a", "b'", '"q"', "$HOME", "a|b"]
    result = run_command(command, cwd=tmp_path, env=None, timeout=30)
    assert result.ok
    assert json.loads((tmp_path / "args.json").read_text()) == [
        '{"name":"x","count":3}',
        "#Journal",
        "'a",
        "b'",
        '"q"',
        "$HOME",
        "a|b",
    ]


@pytest.mark.slow
def test_grep_with_json_literal_really_matches(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data/config.json").write_text('{"name":"x","count":3}\n')
    (tmp_path / "j.md").write_text("#Journal\n")
    assert run_command('grep -qx {"name":"x","count":3} data/config.json', cwd=tmp_path, env=None, timeout=10).ok
    assert run_command("grep -qx #Journal j.md", cwd=tmp_path, env=None, timeout=10).ok
    assert not run_command('grep -qx {"name":"y","count":3} data/config.json', cwd=tmp_path, env=None, timeout=10).ok


def test_waiting_for_a_command_never_polls(monkeypatch, tmp_path) -> None:
    """The wait wakes on the child's exit (a pidfd), not on a sleep loop that notices it up to 50 ms late."""
    import time as time_module

    def no_sleep(seconds: float) -> None:
        raise AssertionError(f"polled with sleep({seconds})")

    monkeypatch.setattr(time_module, "sleep", no_sleep)
    result = proc.run(["sh", "-c", "sleep 0.1; exit 3"], cwd=tmp_path, timeout=30, sweep=False)
    assert result.returncode == 3 and not result.timed_out


def test_a_process_that_fails_to_start_leaves_no_cgroup(tmp_path: Path) -> None:
    """Popen refuses the argv (longer than the kernel takes for one argument): the cgroup made for the process is
    removed, not left behind in the harness's parent cgroup (issue #38)."""
    probe = CGROUPS.create(f"probe-{uuid.uuid4().hex}")
    if probe is None:
        pytest.skip("this machine gives worktrial no cgroup v2 of its own")
    parent = probe.parent
    cgroups.remove(probe)
    before = {p.name for p in parent.iterdir() if p.is_dir()}
    result = proc.run(["/bin/true", "x" * (512 * 1024)], cwd=tmp_path, timeout=30)
    assert result.start_error is not None and result.start_error.startswith("cannot start"), result
    assert {p.name for p in parent.iterdir() if p.is_dir()} == before
