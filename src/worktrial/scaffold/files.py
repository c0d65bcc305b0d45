"""The files ``worktrial init`` writes: hidden tests, reference solutions and the planted bug.

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

# One test file for ES modules and CommonJS alike: an .mjs file is an ES module wherever it lies (the suite's copy
# sits outside the package, so a .js test would follow no package.json), and import() loads either kind.
_JS_SLUGIFY_TEST = """// Hidden test for add-slugify: run from the worktree, imports the agent's worktrial_starter.js.
import assert from "node:assert";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const loaded = await import(pathToFileURL(join(process.cwd(), "worktrial_starter.js")).href);
const slugify = loaded.slugify ?? loaded.default?.slugify;
assert.strictEqual(typeof slugify, "function", "worktrial_starter.js exports no function slugify");
assert.strictEqual(slugify("Hello, World!"), "hello-world");
assert.strictEqual(slugify("  many   spaces  "), "many-spaces");
assert.strictEqual(slugify("Already-a-slug"), "already-a-slug");
assert.strictEqual(slugify("v2.0 -- Release_Notes"), "v2-0-release-notes");
assert.strictEqual(slugify("!!!"), "");
console.log("ok");
"""

_JS_VERSION_TEST = """// Hidden test for fix-version-compare: the planted bug compares versions as text.
import assert from "node:assert";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const loaded = await import(pathToFileURL(join(process.cwd(), "worktrial_version.js")).href);
const isNewer = loaded.isNewer ?? loaded.default?.isNewer;
assert.strictEqual(typeof isNewer, "function", "worktrial_version.js exports no function isNewer");
assert.strictEqual(isNewer("1.10.0", "1.9.2"), true);
assert.strictEqual(isNewer("1.9.2", "1.10.0"), false);
assert.strictEqual(isNewer("2.0", "1.99"), true);
assert.strictEqual(isNewer("1.0.0", "1.0.0"), false);
assert.strictEqual(isNewer("0.0.2", "0.0.1"), true);
console.log("ok");
"""

_JS_SLUGIFY_BODY = """function slugify(text) {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
}
"""

_JS_VERSION_FIXED_BODY = """// Whether version a is newer than version b (dot-separated integers).
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
"""

_JS_VERSION_PLANTED_BODY = """// Whether version a is newer than version b (dot-separated integers).
function isNewer(a, b) {
  return a > b;
}
"""


def _commonjs(body: str, name: str) -> str:
    """A module of one function, exported the CommonJS way."""
    return f"{body}\nmodule.exports = {{ {name} }};\n"


def _esm(body: str) -> str:
    """The same module as an ES module."""
    return body.replace("function ", "export function ", 1)


_JS_SLUGIFY = _commonjs(_JS_SLUGIFY_BODY, "slugify")
_JS_VERSION_FIXED = _commonjs(_JS_VERSION_FIXED_BODY, "isNewer")
_JS_VERSION_PLANTED = _commonjs(_JS_VERSION_PLANTED_BODY, "isNewer")
_ESM_SLUGIFY = _esm(_JS_SLUGIFY_BODY)
_ESM_VERSION_FIXED = _esm(_JS_VERSION_FIXED_BODY)
_ESM_VERSION_PLANTED = _esm(_JS_VERSION_PLANTED_BODY)

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
    "esm": {"slugify": _JS_SLUGIFY_TEST, "version": _JS_VERSION_TEST},
    "commonjs": {"slugify": _JS_SLUGIFY_TEST, "version": _JS_VERSION_TEST},
    "shell": {"slugify": _SH_SLUGIFY_TEST, "version": _SH_VERSION_TEST},
}
SOLUTIONS = {
    "python": {"slugify": _PY_SLUGIFY, "version": _PY_VERSION_FIXED},
    "esm": {"slugify": _ESM_SLUGIFY, "version": _ESM_VERSION_FIXED},
    "commonjs": {"slugify": _JS_SLUGIFY, "version": _JS_VERSION_FIXED},
    "shell": {"slugify": _SH_SLUGIFY, "version": _SH_VERSION_FIXED},
}
PLANTS = {
    "python": _PY_VERSION_PLANTED,
    "esm": _ESM_VERSION_PLANTED,
    "commonjs": _JS_VERSION_PLANTED,
    "shell": _SH_VERSION_PLANTED,
}
"""By flavour: ``python``, ``shell``, and for Node the package's module system, ``esm`` or ``commonjs``."""
