"""The README ``worktrial init`` writes next to the starter suite: the commands to run it, every field explained.

Every ``worktrial`` line it shows is a real command for this suite's path (tests/test_init.py parses each against
the CLI), so a newcomer can copy them as they are; ``my-agent`` is the one word to replace.
"""

from __future__ import annotations

import json
import shlex
import textwrap
from typing import Any

_TEMPLATE = """# Starter suite ({title})

Written by `worktrial init`. From the repository's root, check it, then run an agent on it:

    {check}
    {run}

`check` runs the reference solutions (the `oracle` agent must pass every task) and an agent that does nothing
(`nop` must fail every task). In the second command, `my-agent --yes` stands for your agent's command line:
`{{prompt}}` is replaced by the task's prompt, shell-quoted (or leave it out and read the prompt from stdin or
`$WORKTRIAL_PROMPT_FILE`; see docs/agents.md). `worktrial agents` lists the agents worktrial knows by name
(`--agent NAME` instead of `--agent-cmd`).

Keep this directory out of the agent's reach: hidden tests and solutions must not be in the repository's
committed tree (worktrial also removes the suite directory from every attempt's base when it is committed).

{notes}## suite.json, field by field

- `id`, `name`: how reports name the suite.
- `attempts`: runs per task; pass@k and pass^k are computed over them.
- `files`: globs, relative to suite.json, of every file that belongs to the suite (hidden tests, reference
  solutions, the planted bug). They are part of the suite's digest (`suite_bundle_sha256` in every result), so a
  published number pins them too. Commands see them, read-only, under `$WORKTRIAL_SUITE_DIR`; a file not listed
  here is not there.
- `environment`: set up once per slot (not per attempt) on the pinned commit; everything it leaves, ignored files
  included, is committed as the base every attempt starts from, so the agent sees a clean `git status`.
  Detected here: `{setup}`.
{cache}
- `tasks[].category`: `capability` (can the agent do something new) or `regression` (does it fix or keep
  something that must work).
- `tasks[].environment`: replaces the suite's for that task; `fix-version-compare` uses it to plant its bug
  (`planted/worktrial_version.{ext}`) in the base, where `git diff` does not show it.
- `tasks[].prompt`: all the agent is told.
- `tasks[].verify_commands`: all must exit 0 for a claimed success to count; they run the hidden tests from
  `$WORKTRIAL_SUITE_DIR/hidden/` against the worktree. Each hidden test is a judge: it runs the agent's code in a
  child process and passes only when what the child prints is right, never on the child's exit status, so an
  early `exit(0)` or a module planted in the worktree passes nothing (`worktrial check` forges every verifier this
  way and warns about one that passes). Keep that shape when you write your own.
- `tasks[].solution`: the reference solution the `oracle` agent runs (it copies a file from `solutions/`).
- `tasks[].timeout_secs`, `verify_timeout_secs`: limits for the agent and for each verify command.

Replace the two tasks with real ones from your repository: a bug you fixed (plant the old code in a task's
`environment`, or pin the task to the commit before the fix with `"workspace": {{"ref": "<commit>"}}`) and a
feature you added, each with the test that proved it. See docs/suite-format.md.
"""

_CACHED = (
    "`cache_key` (`{key}`) keeps the result in worktrial's cache, so later runs and `check`'s later passes replay "
    "it instead of installing again. It names the files setup depends on and a digest of their contents when "
    "init ran: change it (any new string) to force a fresh setup, e.g. after editing them."
)
_UNCACHED_EDITABLE = (
    "There is no `cache_key`: the editable install (`pip install -e .`) of a `src/` layout records the path of "
    "the slot that made it, and a cached copy replayed in another slot would import that slot's code. Add one "
    '(`"cache_key": "v1"`) only once your tests import the code from the worktree itself.'
)
_UNCACHED = 'Add `"cache_key": "v1"` to reuse the result across runs once setup does real work.'


def readme(
    *, title: str, suite_arg: str, setup: list[Any], cache_key: str | None, editable: bool, ext: str, notes: str
) -> str:
    """The README for a suite at ``suite_arg`` (as typed from the repository's root)."""
    suite = shlex.quote(suite_arg)
    cache = _CACHED.format(key=cache_key) if cache_key is not None else None
    return _TEMPLATE.format(
        title=title,
        check=f"worktrial check {suite} --trust",
        run=f"worktrial eval --suite {suite} --trust --agent-cmd 'my-agent --yes {{prompt}}'",
        notes=f"{_wrap(notes)}\n\n" if notes else "",
        setup=json.dumps(setup),
        cache=_wrap(
            "`timeout_secs` bounds each setup command. " + (cache or (_UNCACHED_EDITABLE if editable else _UNCACHED)),
            indent="  ",
        ),
        ext=ext,
    )


def _wrap(text: str, indent: str = "") -> str:
    return textwrap.fill(
        text, width=116, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False
    )
