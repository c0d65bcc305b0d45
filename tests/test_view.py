"""worktrial view, show, JUnit and the GitHub summary, on real runs; the page is opened in a real Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import xmlschema
from click.testing import Result

from tests.conftest import SuiteWriter, task
from worktrial.model.envelope import Envelope

if TYPE_CHECKING:
    from playwright.sync_api import Page

DATA = Path(__file__).parent / "data"
ARTIFACT_DIR = Path(__file__).resolve().parent.parent / "test-artifacts"
FAILING_VERIFY = {"sh": "echo collecting; echo 'FAILED test_math.py::test_add - assert 3 == 4'; exit 1"}

Cli = Callable[..., Result]


def _suite(write_suite: SuiteWriter, attempts: int = 2) -> Path:
    return write_suite(
        [
            task("ok-task", solution=[{"sh": "echo done > done.txt"}]),
            task(
                "bad-task",
                category="regression",
                verify_commands=[FAILING_VERIFY],
                solution=[{"sh": "printf 'def add(a, b):\\n    return a - b\\n' > math_utils.py"}],
            ),
        ],
        attempts=attempts,
    )


def _eval(cli: Cli, repo: Path, suite: Path, *extra: str) -> str:
    agent = [] if "--agent-cmd" in extra else ["--agent", "oracle"]
    result = cli(["eval", "--suite", str(suite), *agent, "--trust", "-q", "--format", "json", *extra], cwd=repo)
    assert result.exit_code == 0, result.output
    text = Path(extra[extra.index("--output") + 1]).read_text() if "--output" in extra else result.stdout
    run_id: str = json.loads(text)["run"]["id"]
    return run_id


def test_junit_is_valid_and_names_the_failure(cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> None:
    junit = tmp_path / "out" / "junit.xml"
    junit.parent.mkdir()
    _eval(cli, repo, _suite(write_suite), "--junit", str(junit))
    schema = xmlschema.XMLSchema(DATA / "junit.xsd")
    schema.validate(junit)
    tree: Any = schema.to_dict(junit)  # nested dicts and lists, shaped by the XSD
    suites = {s["@name"]: s for s in tree["testsuite"]}
    assert set(suites) == {"test-suite.capability", "test-suite.regression"}
    assert suites["test-suite.capability"]["@failures"] == 0
    bad = suites["test-suite.regression"]["testcase"][0]
    assert bad["@name"] == "bad-task"
    assert "0/2 attempts passed" in bad["failure"]["@message"]
    assert "verify failed" in bad["failure"]["@message"]


def test_junit_escapes_hostile_text(cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> None:
    hostile = '<bad & \x07 ]]> "quote"'
    suite = write_suite([task("t<&>", verify_commands=[{"sh": f"exit 1 # {hostile}"}])])
    junit = tmp_path / "junit.xml"
    _eval(cli, repo, suite, "--junit", str(junit))
    xmlschema.XMLSchema(DATA / "junit.xsd").validate(junit)
    assert "t&lt;&amp;&gt;" in junit.read_text()


def test_github_step_summary_is_appended(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    _eval(cli, repo, _suite(write_suite))
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    assert "### worktrial: Test suite" in text
    assert "| **overall** | 2/4 |" in text
    assert "`bad-task` 0/2" in text and "verify failed" in text


def test_view_writes_a_self_contained_page(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    run_id = _eval(cli, repo, _suite(write_suite))
    result = cli(["view", run_id], cwd=repo)
    assert result.exit_code == 0, result.output
    page = Path(result.stdout.strip())
    assert page.parent == repo / ".worktrial" / "view"
    html = page.read_text()
    assert "ok-task" in html and "bad-task" in html and 'id="curves-chart"' in html
    # Self-contained: no external scripts, styles or fonts.
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html
    assert "<script src" not in html and "<link" not in html


def test_view_escapes_agent_text(cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> None:
    suite = write_suite([task("x", verify_commands=[{"sh": "exit 1 # <script>alert(1)</script>"}])])
    run_id = _eval(cli, repo, suite)
    page = Path(cli(["view", run_id, "--output", str(tmp_path / "p.html")], cwd=repo).stdout.strip())
    html = page.read_text()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_view_of_a_published_envelope_without_a_repository(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    envelope = tmp_path / "published" / "envelope.json"
    envelope.parent.mkdir()
    _eval(cli, repo, _suite(write_suite), "--output", str(envelope))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    result = cli(["view", str(envelope), "--output", str(outside / "page.html")], cwd=outside)
    assert result.exit_code == 0, result.output
    assert "bad-task" in (outside / "page.html").read_text()


def test_show_run_task_and_attempt(cli: Cli, repo: Path, write_suite: SuiteWriter) -> None:
    run_id = _eval(cli, repo, _suite(write_suite))
    summary = cli(["show", run_id], cwd=repo)
    assert summary.exit_code == 0, summary.output
    assert "bad-task" in summary.stdout and "ok-task" in summary.stdout
    latest = cli(["show"], cwd=repo)
    assert run_id in latest.stdout
    one_task = cli(["show", run_id, "bad-task"], cwd=repo)
    assert "verify failed" in one_task.stdout
    attempt = cli(["show", run_id, "bad-task", "2"], cwd=repo)
    assert attempt.exit_code == 0 and "bad-task #2" in attempt.stdout
    missing = cli(["show", run_id, "nope"], cwd=repo)
    assert missing.exit_code == 2 and "has no task 'nope'" in missing.output


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def _browser_page(errors: list[str]) -> Iterator[Page]:
    """A page of a real headless Chromium that may load only file: URLs; console errors go to ``errors``."""
    browser_path = _chromium()
    if browser_path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; `make test` installs it (Debian package chromium)")
        pytest.skip("chromium is not installed (apt-get install chromium, or run `make test`)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=browser_path,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(10_000)  # a missing element fails the test in seconds, not half a minute
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.route(
                "**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort()
            )
            yield page
        finally:
            browser.close()


@pytest.mark.browser
@pytest.mark.slow
def test_page_in_headless_chromium(cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> None:
    suite = _suite(write_suite)
    first = _eval(cli, repo, suite)
    # The second run's agent changes files, so its failed attempts carry a patch to render.
    agent = "printf 'def add(a, b):\\n    return a - b\\n' > math_utils.py; echo done > done.txt; echo edited-by-agent"
    second = _eval(cli, repo, suite, "--agent-cmd", agent, "--attempts", "3", "--label", "my agent")
    page_path = Path(cli(["view", first, second, "--output", str(tmp_path / "view.html")], cwd=repo).stdout.strip())
    errors: list[str] = []
    with _browser_page(errors) as page:
        page.goto(page_path.as_uri())
        assert page.locator("#curves-chart polyline.curve").count() == 4
        assert page.locator("#leaderboard").is_visible() and page.locator("#comparison").is_visible()
        first_table = page.locator("#tasks-0")
        assert first_table.get_by_text("ok-task", exact=True).is_visible()
        assert first_table.get_by_text("bad-task", exact=True).is_visible()
        failed = page.locator('#run-1 details.attempt[data-task="bad-task"][data-outcome="fail"]').first
        diff = failed.locator("pre.diff")
        assert not diff.is_visible()
        failed.locator("summary").click()
        assert diff.is_visible()
        assert failed.locator("pre.diff span.add", has_text="return a - b").is_visible()
        assert "FAILED test_math.py::test_add" in failed.locator("pre.failing").inner_text()
        assert "edited-by-agent" in failed.locator("pre.log").first.inner_text()
        # The filter hides the tasks that do not match.
        page.locator("#run-0 .task-filter").fill("ok-")
        assert not first_table.get_by_text("bad-task", exact=True).is_visible()
        assert page.locator("#run-0 .shown-count").inner_text() == "1 of 2 tasks shown"
        page.locator("#run-0 .task-filter").fill("")
        # Sorting by task id puts bad-task first.
        page.locator("#tasks-0 th", has_text="task").first.click()
        first_row = page.locator("#tasks-0 tbody.task").first.get_attribute("data-search", timeout=5000)
        assert (first_row or "").startswith("bad-task")
        ARTIFACT_DIR.mkdir(exist_ok=True)
        failed.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACT_DIR / "view.png"), full_page=True)
    assert errors == []


def _long_lines_runs(cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path) -> tuple[Path, list[Envelope]]:
    """Two runs (oracle under a budget; a labelled command agent) whose output, patch and verify lines are long."""
    suite = write_suite(
        [
            task("ok-task"),
            task("bad-task", verify_commands=[{"sh": "python3 -c \"print('F' * 4000)\"; exit 1"}]),
        ],
        attempts=2,
    )
    first = _eval(cli, repo, suite, "--max-cost", "5", "--allow-unpriced")
    agent = "python3 -c \"print('L' * 5000)\"; printf 'a%.0s' $(seq 3000) > long.txt; echo done > done.txt"
    second = _eval(cli, repo, suite, "--agent-cmd", agent, "--label", "my agent")
    page = Path(cli(["view", first, second, "--output", str(tmp_path / "view.html")], cwd=repo).stdout.strip())
    runs = repo / ".worktrial" / "runs"
    envelopes = [Envelope.model_validate_json((runs / r / "envelope.json").read_text()) for r in (first, second)]
    return page, envelopes


@pytest.mark.browser
@pytest.mark.slow
def test_page_shows_the_sandbox_and_budget_and_names_runs(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    page_path, (oracle, labelled) = _long_lines_runs(cli, repo, write_suite, tmp_path)
    summary = oracle.sandbox_summary()
    assert summary is not None
    errors: list[str] = []
    with _browser_page(errors) as page:
        page.goto(page_path.as_uri())
        assert page.locator("#run-0 dd.sandbox").first.inner_text() == summary
        assert page.locator("#run-1 dd.sandbox").first.inner_text() == labelled.sandbox_summary()
        assert "--max-cost $5.00; spent $0.0000" in page.locator("#run-0 dd.budget").inner_text()
        assert page.locator("#run-1 dd.budget").count() == 0
        # Runs are named by label, agent and model everywhere, never by run id alone.
        names = ["oracle", "my agent — command"]
        assert page.locator("#leaderboard td.run-name").all_inner_texts() == names
        assert page.locator("#comparison h3 .run-name").all_inner_texts() == names[::-1]
        assert page.locator("nav.run-tabs a").all_inner_texts() == names
        assert [page.locator(f"#run-{i} h2").inner_text() for i in (0, 1)] == names
        assert page.locator("#leaderboard td code").all_inner_texts() == [oracle.run.id, labelled.run.id]
    assert errors == []


@pytest.mark.browser
@pytest.mark.slow
def test_page_wraps_long_lines_and_links_each_attempt(
    cli: Cli, repo: Path, write_suite: SuiteWriter, tmp_path: Path
) -> None:
    page_path, _ = _long_lines_runs(cli, repo, write_suite, tmp_path)
    errors: list[str] = []
    with _browser_page(errors) as page:
        # #task/attempt opens that attempt of the first run and scrolls to it; #run-N/task/attempt another run's.
        for fragment, run in (("bad-task/2", 0), ("run-1/ok-task/1", 1)):
            page.goto(f"{page_path.as_uri()}#{fragment}")
            attempt = page.locator(f'details.attempt[data-fragment="{fragment}"]')
            assert attempt.count() == 1 and attempt.get_attribute("open") is not None
            assert page.locator(f"#run-{run}").locator(f'details[data-fragment="{fragment}"]').count() == 1
            box = attempt.locator("summary").bounding_box()
            assert box is not None and 0 <= box["y"] < 900
        # Each attempt's own link opens it.
        link = page.locator('details[data-fragment="run-1/bad-task/1"] a.permalink')
        assert link.get_attribute("href") == "#run-1/bad-task/1"
        link.click()
        page.wait_for_function("document.querySelector('details[data-fragment=\"run-1/bad-task/1\"]').open")
        # Every attempt expanded: thousands of characters without a space wrap, the page never scrolls sideways.
        page.evaluate("document.querySelectorAll('details').forEach(function (d) { d.open = true; })")
        assert page.locator("pre.log", has_text="LLLL").first.is_visible()
        width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width[0] <= width[1], f"page is {width[0]}px wide in a {width[1]}px window"
    assert errors == []
