"""Fake agent CLIs for tests: real executables on PATH that speak each agent's published output format.

``install_fake(bin_dir, binary, scenarios)`` writes an executable Python script named ``binary``. When run,
it picks a scenario from the ``[scenario:NAME]`` marker found in its arguments or stdin (so one suite can
exercise several scenarios, one per task), records how it was invoked into ``$FAKE_LOG_DIR`` (or the directory named in
``.fake-log-dir`` beside it), optionally
writes ``done.txt`` into its working directory (the worktree) so verification passes, drops a file into
each config directory named by ``touch_env`` (to prove where state goes), writes files named by
``flag_files`` (``{"-o": content}`` writes content to the path after ``-o``), records whether such a file
was already there (state leaking from an earlier attempt), prints the scenario's stdout
lines (and ``stderr`` lines), and exits, or hangs to be cut off by the task timeout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCRIPT = r"""#!{python}
import json, os, re, sys, time

BINARY = {binary!r}
SCENARIOS = json.loads({scenarios!r})

if sys.argv[1:] == ["--version"]:
    print(BINARY + " 9.9.9-fake")
    sys.exit(0)
stdin = sys.stdin.read() if not sys.stdin.isatty() else ""
found = re.search(r"\[scenario:([\w-]+)\]", " ".join(sys.argv[1:]) + " " + stdin)
scenario = SCENARIOS[found.group(1) if found else "normal"]
log_dir = os.environ.get("FAKE_LOG_DIR")
if not log_dir:  # agents get an allow-listed environment: the log dir is also named next to the fake itself
    try:
        with open(os.path.join(os.path.dirname(os.path.realpath(sys.argv[0])), ".fake-log-dir")) as fh:
            log_dir = fh.read().strip()
    except OSError:
        pass
inherited = [
    var for var in scenario.get("touch_env", [])
    if os.path.exists(os.path.join(os.environ.get(var, "/nonexistent"), "session-state"))
]
if log_dir:
    record = {{
        "binary": BINARY,
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "stdin": stdin,
        "env": {{k: v for k, v in os.environ.items() if k in scenario.get("record_env", [])}},
        "inherited_state": inherited,
    }}
    # pids repeat across sandboxes (each has its own PID namespace), so the name also gets random bytes
    with open(os.path.join(log_dir, "%s-%d-%s.json" % (BINARY, os.getpid(), os.urandom(6).hex())), "w") as fh:
        json.dump(record, fh)
for var in scenario.get("touch_env", []):
    os.makedirs(os.environ[var], exist_ok=True)
    with open(os.path.join(os.environ[var], "session-state"), "w") as fh:
        fh.write("state")
if scenario.get("write_done", True):
    with open("done.txt", "w") as fh:
        fh.write("done\n")
for flag, content in scenario.get("flag_files", {{}}).items():
    path = sys.argv[sys.argv.index(flag) + 1]
    with open(path, "w") as fh:
        fh.write(content)
for line in scenario.get("stderr", []):
    sys.stderr.write(line + "\n")
for line in scenario.get("stdout", []):
    sys.stdout.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    sys.stdout.flush()
if scenario.get("partial"):
    sys.stdout.write(scenario["partial"])
    sys.stdout.flush()
if scenario.get("hang"):
    time.sleep(120)
sys.exit(scenario.get("exit", 0))
"""


def install_fake(bin_dir: Path, binary: str, scenarios: dict[str, dict[str, Any]]) -> Path:
    """Write an executable fake ``binary`` into ``bin_dir`` that plays ``scenarios``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / binary
    path.write_text(SCRIPT.format(python=sys.executable, binary=binary, scenarios=json.dumps(scenarios)))
    path.chmod(0o755)
    return path


def invocations(log_dir: Path, binary: str) -> list[dict[str, Any]]:
    """Every recorded run of ``binary``."""
    return [json.loads(p.read_text()) for p in sorted(log_dir.glob(f"{binary}-*.json"))]


def share_with_sandbox(*directories: Path) -> None:
    """Share test-owned directories writable with every sandboxed attempt, through the user's ``[sandbox]`` config.

    Fakes record how they were called into such a directory; the sandbox hides every other host path. As root,
    sandboxed programs run as an unprivileged uid: the directories are made writable for everyone, as /tmp is.
    """
    from worktrial.state.config import USER_FILE, config_dir

    for directory in directories:
        directory.chmod(0o1777)

    config = config_dir() / USER_FILE
    config.parent.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(json.dumps(str(d)) for d in directories)
    config.write_text(
        config.read_text() + f"\n[sandbox]\nwritable = [{listed}]\n"
        if config.exists()
        else f"[sandbox]\nwritable = [{listed}]\n"
    )
