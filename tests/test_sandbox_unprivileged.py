"""A default run (``--sandbox auto``, no flag) is sandboxed on this machine, as root and as an unprivileged user.

The harness runs as a real subprocess: as root it is simply started; as an unprivileged user it is started through
``setpriv`` with a uid that has no other files on this machine, so bubblewrap must build the sandbox from an
unprivileged user namespace, as on a developer's laptop. The agent tries to read a key planted in the user's home,
to write into the user's repository and to leave a daemon behind; the run must record ``bubblewrap`` and none of
those must have worked.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from tests.conftest import alive_with_marker

AGENT = r"""
cat "$HOME/.ssh/id_rsa" > leaked.txt 2>/dev/null
cat "$H_HOME/.ssh/id_rsa" "$H_HOME/.cargo/credentials.toml" "$H_SECRET" "$H_SUITE" /etc/shadow >> leaked.txt 2>/dev/null
cat "$H_SHOWN/key" >> leaked.txt 2>/dev/null
id -u > uid.txt
cat "$H_REPO/README.md" "$(dirname "$H_SUITE")/hidden_test.py" >> leaked.txt 2>/dev/null
hello > hello.txt 2>&1
python3 -c "open('/proc/sys/kernel/core_pattern', 'w')" 2>/dev/null && echo writable > proc-sys.txt
python3 -c "
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); s.sendall(b'touch /tmp/owned'); print('connected')
except OSError as e:
    print('refused', e.errno)
" "$H_SOCK" > socket.txt
ls / > root.txt
ls -A /run /var > run-var.txt
echo pwned > "$H_REPO/README.md" 2>/dev/null
setsid env -u WORKTRIAL_PROC_TOKEN sleep 300 "$H_MARK" >/dev/null 2>&1 &
echo "$HOME" > home.txt
touch done.txt
"""


def _free_uid() -> int:
    """A uid no account on this machine has, so nothing of anyone else's is writable by it."""
    for uid in range(61_000, 62_000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("no free uid between 61000 and 62000")


def _as(uid: int | None) -> list[str]:
    if uid is None:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv is not None
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def _userns_available(uid: int) -> str | None:
    """Why an unprivileged user cannot create a user namespace here (None when it can)."""
    probe = subprocess.run([*_as(uid), "unshare", "--user", "--map-root-user", "true"], capture_output=True)
    if probe.returncode != 0:
        return f"unprivileged user namespaces are unavailable: {probe.stderr.decode().strip()}"
    return None


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("who", ["root", "unprivileged"])
def test_a_default_run_is_sandboxed(who: str) -> None:
    if os.geteuid() != 0 and who == "root":
        pytest.skip("the harness is not running as root")
    uid = None if who == "root" else (os.geteuid() if os.geteuid() != 0 else _free_uid())
    if uid is not None and uid != os.geteuid():
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) is needed to become an unprivileged user")
        if reason := _userns_available(uid):
            pytest.skip(reason)
        probe = subprocess.run([*_as(uid), sys.executable, "-c", "import worktrial"], capture_output=True, cwd="/")
        if probe.returncode != 0:  # e.g. a Python installed under /root, which no other user may search
            pytest.skip(f"this test's Python cannot run as uid {uid}: {probe.stderr.decode().strip()[-200:]}")
    base = Path(tempfile.mkdtemp(prefix="wt-default-sandbox-", dir="/var/tmp"))
    marker = f"wt-default-{uuid.uuid4().hex}"
    try:
        base.chmod(0o755)
        home, repo = base / "home", base / "repo"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "id_rsa").write_text("SECRET-SSH-KEY\n")
        # A developer's PATH: ~/.cargo/bin shows its programs, never the credentials next to them.
        (home / ".cargo" / "bin").mkdir(parents=True)
        (home / ".cargo" / "credentials.toml").write_text('[registry]\ntoken = "SECRET-CARGO"\n')
        (home / ".cargo" / "bin" / "hello").write_text("#!/bin/sh\necho hello from cargo\n")
        (home / ".cargo" / "bin" / "hello").chmod(0o755)
        # A root-owned 0600 file outside HOME, and a socket server that runs what it is sent.
        secret = Path(tempfile.mkdtemp(prefix="wt-root-secret-", dir="/var/tmp"))
        (secret / "key").write_text("SECRET-ROOT-FILE\n")
        (secret / "key").chmod(0o600)
        secret.chmod(0o755)
        shown = Path(tempfile.mkdtemp(prefix="wt-shown-", dir="/var/tmp"))
        (shown / "key").write_text("SECRET-SHOWN-ROOT-FILE\n")
        (shown / "key").chmod(0o600)
        shown.chmod(0o755)
        sock_path = secret / "runner.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(sock_path))
        sock_path.chmod(0o777)
        server.listen(4)
        connected: list[bytes] = []

        def serve() -> None:
            try:
                conn, _ = server.accept()
                connected.append(conn.recv(100))
            except OSError:
                pass

        threading.Thread(target=serve, daemon=True).start()
        repo.mkdir()
        (repo / "README.md").write_text("# mine\n")
        env = {
            "PATH": f"{home / '.cargo' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(home),
            "TMPDIR": str(base),
            "WORKTRIAL_TRUST": "1",
            "H_REPO": str(repo),
            "H_MARK": marker,
            "H_HOME": str(home),
            "H_SECRET": str(secret / "key"),
            "H_SHOWN": str(shown),
            "H_SOCK": str(sock_path),
            "H_SUITE": str(base / "evals" / "suite.json"),
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
        }
        for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-q", "-m", "initial"]):
            subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
        (base / "agent.sh").write_text(AGENT)
        task = {"id": "t", "prompt": "p", "timeout_secs": 60, "verify_commands": ["test -f done.txt"]}
        (base / "evals").mkdir()  # the suite and its hidden test, beside the repository as a shared checkout is
        (base / "evals" / "suite.json").write_text(json.dumps({"id": "s", "name": "s", "attempts": 1, "tasks": [task]}))
        (base / "evals" / "hidden_test.py").write_text("SECRET-HIDDEN-TEST\n")
        if uid is not None:
            subprocess.run(["chown", "-R", f"{uid}:{uid}", str(base)], check=True)
        command = [sys.executable, "-m", "worktrial", "eval", "--suite", str(base / "evals" / "suite.json")]
        command += ["--agent-cmd", f"sh {base / 'agent.sh'}", "--keep-worktrees", "--format", "json", "-q"]
        command += ["--pass-env", "H_*"]  # the agent knows where to aim, as a hostile one would find out
        # A directory the user shows holding a root-owned 0600 file: shown, yet unreadable, since nobody inside is
        # root (as an unprivileged user that file is another user's anyway).
        command += ["--sandbox-show", str(shown)]
        done = subprocess.run([*_as(uid), *command], cwd=repo, env=env, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr.decode()
        assert b"unsandboxed" not in done.stderr, done.stderr.decode()
        envelope = json.loads(done.stdout)
        assert envelope["run"]["sandbox"]["kind"] == "bubblewrap", envelope["run"]["sandbox"]
        shown = envelope["run"]["sandbox"]["shown"]  # a published number says how it was contained
        assert "/usr" in shown and any(s.startswith("/etc (read-only;") for s in shown), shown
        recorded_uid = int(envelope["run"]["sandbox"]["uid"].split()[1])
        assert recorded_uid != 0 and recorded_uid == (uid if uid is not None else recorded_uid), envelope["run"]
        attempt = envelope["report"]["tasks"][0]["attempts"][0]
        assert attempt["outcome"] == "pass", attempt
        kept = [p for p in base.rglob("done.txt") if p.parent != repo]
        assert kept, "the kept worktree was not found"
        worktree = kept[0].parent
        assert (worktree / "leaked.txt").read_text() == ""  # no key, credentials, root file, suite or /etc/shadow
        assert int((worktree / "uid.txt").read_text()) == recorded_uid  # never root inside
        assert (worktree / "hello.txt").read_text() == "hello from cargo\n"
        assert not (worktree / "proc-sys.txt").exists(), "/proc/sys was writable"
        assert (worktree / "socket.txt").read_text().startswith("refused") and connected == []
        top = set((worktree / "root.txt").read_text().split())
        # Only what the attempt needs: a top directory exists only on the way to a program shown (this Python).
        python = {Path(os.path.realpath(p)).parts[1] for p in (sys.prefix, sys.base_prefix, sys.executable)}
        assert not top & ({"home", "root", "srv", "opt", "mnt", "media"} - python), top
        assert (worktree / "run-var.txt").read_text().split() == ["/run:", "/var:", "tmp"]  # no sockets, no /var
        assert (worktree / "home.txt").read_text().strip() != str(home)
        assert (repo / "README.md").read_text() == "# mine\n"
        assert not alive_with_marker(marker), "a setsid daemon outlived its attempt"
    finally:
        for pid in alive_with_marker(marker):
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(base)], check=False)
        if "server" in locals():
            server.close()
            subprocess.run(["rm", "-rf", str(secret), str(shown)], check=False)
