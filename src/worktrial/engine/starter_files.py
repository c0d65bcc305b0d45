"""The files ``worktrial init`` writes: hidden tests, reference solutions, the planted bug and the README.

Tests read the code under test from the current directory (the attempt's worktree), never from where the test
file lives (the read-only suite directory), and use only each language's standard library.
"""

from __future__ import annotations

_PY_SLUGIFY_TEST = '''"""Hidden test for add-slugify: run in the worktree, imports the agent's worktrial_starter.py."""
import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from worktrial_starter import slugify  # noqa: E402


class SlugifyTest(unittest.TestCase):
    def test_examples(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("  many   spaces  "), "many-spaces")
        self.assertEqual(slugify("Already-a-slug"), "already-a-slug")
        self.assertEqual(slugify("v2.0 -- Release_Notes"), "v2-0-release-notes")
        self.assertEqual(slugify("!!!"), "")


if __name__ == "__main__":
    unittest.main()
'''

_PY_VERSION_TEST = '''"""Hidden test for fix-version-compare: the planted bug compares versions as text."""
import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from worktrial_version import is_newer  # noqa: E402


class VersionTest(unittest.TestCase):
    def test_numeric_parts(self):
        self.assertTrue(is_newer("1.10.0", "1.9.2"))
        self.assertFalse(is_newer("1.9.2", "1.10.0"))

    def test_regressions_stay_fixed(self):
        self.assertTrue(is_newer("2.0", "1.99"))
        self.assertFalse(is_newer("1.0.0", "1.0.0"))
        self.assertTrue(is_newer("0.0.2", "0.0.1"))


if __name__ == "__main__":
    unittest.main()
'''

_PY_SLUGIFY = """import re


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
"""

_PY_VERSION_FIXED = '''def is_newer(a: str, b: str) -> bool:
    """Whether version ``a`` is newer than version ``b`` (dot-separated integers)."""
    return [int(p) for p in a.split(".")] > [int(p) for p in b.split(".")]
'''

_PY_VERSION_PLANTED = '''def is_newer(a: str, b: str) -> bool:
    """Whether version ``a`` is newer than version ``b`` (dot-separated integers)."""
    return a > b
'''

_JS_SLUGIFY_TEST = """// Hidden test for add-slugify: run from the worktree, requires the agent's worktrial_starter.js.
const assert = require("assert");
const path = require("path");
const { slugify } = require(path.join(process.cwd(), "worktrial_starter.js"));

assert.strictEqual(slugify("Hello, World!"), "hello-world");
assert.strictEqual(slugify("  many   spaces  "), "many-spaces");
assert.strictEqual(slugify("Already-a-slug"), "already-a-slug");
assert.strictEqual(slugify("v2.0 -- Release_Notes"), "v2-0-release-notes");
assert.strictEqual(slugify("!!!"), "");
console.log("ok");
"""

_JS_VERSION_TEST = """// Hidden test for fix-version-compare: the planted bug compares versions as text.
const assert = require("assert");
const path = require("path");
const { isNewer } = require(path.join(process.cwd(), "worktrial_version.js"));

assert.strictEqual(isNewer("1.10.0", "1.9.2"), true);
assert.strictEqual(isNewer("1.9.2", "1.10.0"), false);
assert.strictEqual(isNewer("2.0", "1.99"), true);
assert.strictEqual(isNewer("1.0.0", "1.0.0"), false);
assert.strictEqual(isNewer("0.0.2", "0.0.1"), true);
console.log("ok");
"""

_JS_SLUGIFY = """function slugify(text) {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
}

module.exports = { slugify };
"""

_JS_VERSION_FIXED = """// Whether version a is newer than version b (dot-separated integers).
function isNewer(a, b) {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const x = pa[i] === undefined ? -1 : pa[i];
    const y = pb[i] === undefined ? -1 : pb[i];
    if (x !== y) return x > y;
  }
  return false;
}

module.exports = { isNewer };
"""

_JS_VERSION_PLANTED = """// Whether version a is newer than version b (dot-separated integers).
function isNewer(a, b) {
  return a > b;
}

module.exports = { isNewer };
"""

_SH_SLUGIFY_TEST = """# Hidden test for add-slugify: runs the agent's worktrial_starter.sh from the worktree.
set -e
check() {
  got=$(sh ./worktrial_starter.sh "$1")
  [ "$got" = "$2" ] || { echo "slug of '$1': got '$got', want '$2'"; exit 1; }
}
check 'Hello, World!' hello-world
check '  many   spaces  ' many-spaces
check 'Already-a-slug' already-a-slug
check 'v2.0 -- Release_Notes' v2-0-release-notes
check '!!!' ''
echo ok
"""

_SH_VERSION_TEST = """# Hidden test for fix-version-compare: the planted bug compares versions as text.
set -e
newer() { sh ./worktrial_version.sh "$1" "$2"; }
newer 1.10.0 1.9.2 || { echo "1.10.0 should be newer than 1.9.2"; exit 1; }
! newer 1.9.2 1.10.0 || { echo "1.9.2 should not be newer than 1.10.0"; exit 1; }
newer 2.0 1.99 || { echo "2.0 should be newer than 1.99"; exit 1; }
! newer 1.0.0 1.0.0 || { echo "equal versions are not newer"; exit 1; }
echo ok
"""

_SH_SLUGIFY = """# Prints the slug of its first argument.
printf '%s' "$1" | tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9][^a-z0-9]*/-/g' -e 's/^-*//' -e 's/-*$//'
"""

_SH_VERSION_FIXED = """# Exit 0 when version $1 is newer than version $2 (dot-separated integers).
[ "$1" != "$2" ] && [ "$(printf '%s\\n%s\\n' "$1" "$2" | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)" = "$1" ]
"""

_SH_VERSION_PLANTED = """# Exit 0 when version $1 is newer than version $2 (dot-separated integers).
[ "$1" != "$2" ] && [ "$(printf '%s\\n%s\\n' "$1" "$2" | sort | tail -n 1)" = "$1" ]
"""

TESTS = {
    "python": {"slugify": _PY_SLUGIFY_TEST, "version": _PY_VERSION_TEST},
    "node": {"slugify": _JS_SLUGIFY_TEST, "version": _JS_VERSION_TEST},
    "shell": {"slugify": _SH_SLUGIFY_TEST, "version": _SH_VERSION_TEST},
}
SOLUTIONS = {
    "python": {"slugify": _PY_SLUGIFY, "version": _PY_VERSION_FIXED},
    "node": {"slugify": _JS_SLUGIFY, "version": _JS_VERSION_FIXED},
    "shell": {"slugify": _SH_SLUGIFY, "version": _SH_VERSION_FIXED},
}
PLANTS = {"python": _PY_VERSION_PLANTED, "node": _JS_VERSION_PLANTED, "shell": _SH_VERSION_PLANTED}

README = """# Starter suite ({kind})

Written by `worktrial init`. Check it, then run an agent on it:

    worktrial check evals/suite.json            # oracle passes every task, nop fails every task
    worktrial eval --suite evals/suite.json --agent-cmd "my-agent {{prompt}}"

Keep this directory out of the agent's reach: hidden tests and solutions must not be in the repository's
committed tree (worktrial also removes the suite directory from every attempt's base when it is committed).

## suite.json, field by field

- `id`, `name`: how reports name the suite.
- `attempts`: runs per task; pass@k and pass^k are computed over them.
- `files`: globs, relative to suite.json, of every file that belongs to the suite (hidden tests, reference
  solutions, the planted bug). They are part of the suite's digest (`suite_bundle_sha256` in every result), so a
  published number pins them too. Commands see them, read-only, under `$WORKTRIAL_SUITE_DIR`; a file not listed
  here is not there.
- `environment`: set up once per slot (not per attempt) on the pinned commit; everything it leaves, ignored files
  included, is committed as the base every attempt starts from, so the agent sees a clean `git status`.
  Detected here: `{setup}`.
  `timeout_secs` bounds each setup command. Add `"cache_key": "v1"` to reuse the result across runs.
- `tasks[].category`: `capability` (can the agent do something new) or `regression` (does it fix or keep
  something that must work).
- `tasks[].environment`: replaces the suite's for that task; `fix-version-compare` uses it to plant its bug
  (`planted/worktrial_version.{ext}`) in the base, where `git diff` does not show it.
- `tasks[].prompt`: all the agent is told.
- `tasks[].verify_commands`: all must exit 0 for a claimed success to count; they run the hidden tests from
  `$WORKTRIAL_SUITE_DIR/hidden/` against the worktree.
- `tasks[].solution`: the reference solution the `oracle` agent runs (it copies a file from `solutions/`).
- `tasks[].timeout_secs`, `verify_timeout_secs`: limits for the agent and for each verify command.

Replace the two tasks with real ones from your repository: a bug you fixed (plant the old code in a task's
`environment`, or pin the task to the commit before the fix with `"workspace": {{"ref": "<commit>"}}`) and a
feature you added, each with the test that proved it. See docs/suite-format.md.
"""
