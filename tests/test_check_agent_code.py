"""`worktrial check` warns about verify commands that run code the agent controls, and only about those."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import task
from tests.hostile_support import run_worktrial
from worktrial.analysis.agent_code import NOTE, agent_code_warning
from worktrial.analysis.lint import lint_suite
from worktrial.model.commands import ArgvCommand, Command, ShCommand
from worktrial.model.suite import parse_suite
from worktrial.render.check_markdown import render_lints

# Each command, and a phrase the warning must contain.
RISKY: dict[str, tuple[Command, str]] = {
    "python3 -m": ("python3 -m pytest -q tests", "puts the worktree first on sys.path (-m)"),
    "python -c": (ArgvCommand(argv=["python", "-c", "import json; print(1)"]), "first on sys.path (-c)"),
    "python3.11 -m": ("python3.11 -m unittest", "python3.11 -m unittest"),
    "versioned path": ("/usr/bin/python3.12 -m pytest", "(-m)"),
    "sys.executable": (ArgvCommand(argv=[sys.executable, "-m", "pytest"]), "(-m)"),
    "venv python": (".venv/bin/python -m pytest", "(-m)"),
    "options before -m": ("python3 -B -W error -X dev -m pytest", "(-m)"),
    "combined -Bc": (ArgvCommand(argv=["python3", "-Bc", "import x"]), "(-c)"),
    "-I after -m is the module's": (ArgvCommand(argv=["python3", "-m", "pytest", "-I"]), "(-m)"),
    "npx": ("npx jest --ci", "runs npx"),
    "node_modules bin": ("./node_modules/.bin/jest --ci", "node_modules"),
    "node_modules bin without dot": ("node_modules/.bin/vitest run", "node_modules"),
    "relative ./x": ("./run-tests.sh", "'./run-tests.sh' is a program in the worktree"),
    "relative bin/x": ("bin/check --all", "'bin/check' is a program in the worktree"),
    "sh string": (ShCommand(sh="cd tests && python3 -m pytest -q"), "(-m)"),
    "sh string with npx": (ShCommand(sh="test -f a.txt; npx tsc --noEmit"), "runs npx"),
    "sh string relative": (ShCommand(sh="make build || ./scripts/verify"), "'./scripts/verify'"),
    "multi-line sh": (ShCommand(sh="set -e\nFOO=1 python3 -c 'print(1)'\n"), "(-c)"),
    "argv sh -c": (ArgvCommand(argv=["bash", "-ec", "python3 -m pytest"]), "(-m)"),
    "env and timeout wrappers": (ArgvCommand(argv=["env", "A=1", "timeout", "60", "python3", "-m", "x"]), "-m"),
    "nested sh": (ShCommand(sh="sh -c 'npx jest'"), "runs npx"),
    "piped": (ShCommand(sh="cat out.txt | ./filter"), "'./filter'"),
    # The code under test is the agent's: every runner of it can be made to pass by that code (os._exit(0)).
    "isolated -I -m pytest": ("python3 -I -m pytest -q", "runs a module, which imports the code under test"),
    "combined -Im": ("python3 -Im pytest", "runs a module"),
    "-P after other options": ("python3 -B -P -m pytest", "runs a module"),
    "pytest console script": ("pytest -q", "'pytest -q' builds or tests the code under test"),
    "npm test": ("npm test", "'npm test' builds or runs the code under test"),
    "make": ("make check", "'make check' builds or tests"),
    "cargo test": ("cargo test --quiet", "'cargo test'"),
    "go test": ("go test ./...", "'go test'"),
    "a script in the tree through sh": ("sh tests/check.sh", "'sh tests/check.sh' runs a script in the worktree"),
    "a python script in the tree": ("python3 -W error tests/check.py", "runs a script in the worktree"),
    "node script in the tree": ("node test/run.js", "runs a script in the worktree"),
    "sh with isolated python": (ShCommand(sh="cd tests && python3 -I -m pytest -q && test -f ok"), "runs a module"),
    # Forms check was silent on: a hidden test run by the worktree's own interpreter (worktrial init's starter), the
    # test files node finds in the worktree, a project's environment, class paths, installs and PYTHONPATH.
    "venv python on the suite's test": (
        ShCommand(sh='.venv/bin/python "$WORKTRIAL_SUITE_DIR/hidden/test_x.py"'),
        "'.venv/bin/python' is a program in the worktree",
    ),
    "node --test": ("node --test", "runs the test files it finds in the worktree"),
    "node --test of a directory": ("node --test test/", "runs the test files it finds in the worktree"),
    "uv run pytest": ("uv run pytest -q", "'uv run' runs in the project's environment"),
    "uv run with options": ("uv run --with pytest-xdist pytest -n 2", "'pytest -n 2' builds or tests"),
    "poetry run": ("poetry run python -m pytest", "'poetry run' runs in the project's environment"),
    "uvx pytest": ("uvx pytest -q", "'pytest -q' builds or tests"),
    "uvx --from": ("uvx --from pytest==8.3.3 pytest -q", "'pytest -q' builds or tests"),
    "bunx": ("bunx vitest run", "runs bunx"),
    "java class path": ("java -cp build:. org.junit.runner.JUnitCore T", "loads classes from the worktree"),
    "java -jar": ("java -jar target/app.jar", "loads classes from the worktree (target/app.jar)"),
    "pip install -e .": (ShCommand(sh="pip install -e . && python3 -I /opt/t.py"), "installs from the worktree"),
    "PYTHONPATH=.": (
        ShCommand(sh='PYTHONPATH=. python3 "$WORKTRIAL_SUITE_DIR/t.py"'),
        "first on sys.path (PYTHONPATH naming the worktree)",
    ),
}

SAFE: dict[str, Command] = {
    "safe path -P": ArgvCommand(argv=["python3", "-P", "-c", "import json"]),
    "combined -IBc": ArgvCommand(argv=["python3", "-IBc", "print(1)"]),
    "python running a script of the system": "python3 /opt/checks/verify.py",
    "a suite script through sh": ShCommand(sh='sh "$WORKTRIAL_SUITE_DIR/check.sh"'),
    "npm without running anything": "npm --version",
    "absolute program": "/usr/bin/test -f done.txt",
    "plain program on PATH": "grep -q done done.txt",
    "suite dir": ShCommand(sh='"$WORKTRIAL_SUITE_DIR/check.sh" out.txt'),
    "sh with data checks only": ShCommand(sh="cd tests && test -f ok && grep -q done ../done.txt"),
    "quoted text mentioning npx": ShCommand(sh="echo 'npx ./x python3 -m y' > log.txt"),
    "a relative path as an argument": "diff expected/out.txt out.txt",
    "node by absolute path": "/usr/bin/node /opt/checks/run.js",
    # Nothing on the command line names the worktree: check's forging probe decides (test_check_forging.py).
    "the suite's judge, isolated": ShCommand(sh='python3 -I "$WORKTRIAL_SUITE_DIR/judge.py"'),
    "node --test of the suite's file": ShCommand(sh='node --test "$WORKTRIAL_SUITE_DIR/hidden/x.test.mjs"'),
    "pip install from the index": "pip install requests==2.32.3",
    "PYTHONPATH=. ignored by -I": ShCommand(sh='PYTHONPATH=. python3 -I "$WORKTRIAL_SUITE_DIR/t.py"'),
    "java from the suite": ShCommand(sh='java -cp "$WORKTRIAL_SUITE_DIR/checker.jar" Check'),
}


@pytest.mark.parametrize("case", sorted(RISKY))
def test_risky_verify_commands_warn(case: str) -> None:
    command, phrase = RISKY[case]
    warning = agent_code_warning(command)
    assert warning is not None and phrase in warning, warning
    assert warning.startswith("its verdict is the exit status of code the agent controls: ")
    assert len(warning) < 500  # the rule and the safe forms are said once, under every such line (NOTE)


def test_the_rule_and_forms_that_work_are_said_once_under_the_lines() -> None:
    verify = [".venv/bin/python -m pytest -q", ".venv/bin/python -m pytest -q", "npm test"]
    suite = parse_suite(
        {"id": "s", "tasks": [task(f"t{i}", timeout_secs=600, verify_commands=[c]) for i, c in enumerate(verify)]}
    )
    lints = lint_suite(suite)
    assert {lint.note for lint in lints} == {NOTE}
    assert "The rule:" in NOTE and "$WORKTRIAL_SUITE_DIR" in NOTE and "never on an exit status alone" in NOTE
    assert "-I or -P would also keep the tests from importing the agent's code" in NOTE  # no -I for a test runner
    shown = render_lints(lints)
    grouped = [line for line in shown if line.startswith("- ")]
    assert len(grouped) == 2 and grouped[0].startswith(
        "- **warning** 2 verify commands (`$.tasks[0].verify_commands[0]`"
    )
    assert sum("The rule:" in line for line in shown) == 1


@pytest.mark.parametrize("case", sorted(SAFE))
def test_safe_verify_commands_do_not_warn(case: str) -> None:
    assert agent_code_warning(SAFE[case]) is None


def test_only_verify_commands_are_linted_and_as_warnings() -> None:
    """Setup runs before the agent and a solution is the oracle's own code: neither is what the agent controls."""
    suite = parse_suite(
        {
            "id": "s",
            "tasks": [
                task(
                    "t",
                    timeout_secs=600,
                    setup_commands=["python3 -m pip --version"],
                    solution=["./make-it.sh"],
                    verify_commands=["test -f done.txt", "python3 -m pytest -q"],
                )
            ],
        }
    )
    lints = lint_suite(suite)
    assert [(lint.where, lint.severity) for lint in lints] == [("$.tasks[0].verify_commands[1]", "warning")]


@pytest.mark.slow
def test_check_shows_the_warnings_without_failing(repo: Path, write_suite) -> None:
    """The real ``worktrial check``: the warning is in the JSON and the markdown, and the sound suite still passes."""
    suite = write_suite(
        [
            task(
                "risky",
                timeout_secs=600,
                verify_commands=[{"sh": "test -f done.txt && python3 -c 'import json'"}],
            )
        ]
    )
    args = ["check", str(suite), "--trust", "--repeats", "1"]
    result = run_worktrial([*args, "--format", "json"], cwd=repo)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["problems"] == 0 and report["warnings"] == 1
    assert [(lint["where"], lint["severity"]) for lint in report["lints"]] == [
        ("$.tasks[0].verify_commands[0]", "warning")
    ]
    markdown = run_worktrial([*args, "--format", "markdown"], cwd=repo)
    assert markdown.returncode == 0, markdown.stderr
    assert (
        "**warning** `$.tasks[0].verify_commands[0]`: its verdict is the exit status of code the agent"
        in markdown.stdout
    )
    assert "**No problems found.** 1 warning (see Lints)." in markdown.stdout
