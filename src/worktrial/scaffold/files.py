"""The files ``worktrial init`` writes: hidden tests, reference solutions and the planted bug.

Tests read the code under test from the current directory (the attempt's worktree), never from where the test
file lives (the read-only suite directory), and use only each language's standard library.
"""

from __future__ import annotations

_PY_JUDGE = '''
def judge(module, function, cases):
    """Run the agent's function on every case in a child process; exit 1 unless what it prints is the expected."""
    child = (
        "import json, sys; sys.path.append('.'); "  # the standard library first, the worktree after it
        f"from {module} import {function}; "
        f"print(json.dumps([{function}(*args) for args in json.load(sys.stdin)]))"
    )
    python = ".venv/bin/python" if os.path.exists(".venv/bin/python") else sys.executable
    args = [list(case) for case in cases]
    done = subprocess.run([python, "-I", "-c", child], input=json.dumps(args), capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    want = json.dumps(list(cases.values()))
    if not lines or lines[-1] != want:
        got = lines[-1] if lines else "nothing"
        sys.exit(f"{function}: printed {got}, want {want}; stderr: {done.stderr.strip()[-500:]}")
    print("ok")
'''

_PY_SLUGIFY_TEST = (
    '''"""Hidden test for add-slugify, a judge: it runs the agent's worktrial_starter.py in a child process and passes
only when what the child prints is right, never on the child's exit status (an early exit, or a module planted in
the worktree, passes nothing). Run it with the system's ``python3 -I`` from the worktree."""
import json
import os
import subprocess
import sys
'''
    + _PY_JUDGE
    + """

judge(
    "worktrial_starter",
    "slugify",
    {
        ("Hello, World!",): "hello-world",
        ("  many   spaces  ",): "many-spaces",
        ("Already-a-slug",): "already-a-slug",
        ("v2.0 -- Release_Notes",): "v2-0-release-notes",
        ("!!!",): "",
    },
)
"""
)

_PY_VERSION_TEST = (
    '''"""Hidden test for fix-version-compare, a judge (see test_slugify.py): the planted bug compares versions as
text."""
import json
import os
import subprocess
import sys
'''
    + _PY_JUDGE
    + """

judge(
    "worktrial_version",
    "is_newer",
    {
        ("1.10.0", "1.9.2"): True,
        ("1.9.2", "1.10.0"): False,
        ("2.0", "1.99"): True,
        ("1.0.0", "1.0.0"): False,
        ("0.0.2", "0.0.1"): True,
    },
)
"""
)

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
# sits outside the package, so a .js test would follow no package.json), and import() loads either kind. Each is a
# judge: the agent's module runs in a child process, and only what the child prints decides.
_JS_JUDGE = """import { spawnSync } from "node:child_process";

function judge(file, name, cases) {
  const child = [
    'import { readFileSync } from "node:fs";',
    'import { join } from "node:path";',
    'import { pathToFileURL } from "node:url";',
    `const loaded = await import(pathToFileURL(join(process.cwd(), ${JSON.stringify(file)})).href);`,
    `const fn = loaded[${JSON.stringify(name)}] ?? loaded.default?.[${JSON.stringify(name)}];`,
    'const inputs = JSON.parse(readFileSync(0, "utf8"));',
    "console.log(JSON.stringify(inputs.map((args) => fn(...args))));",
  ].join("\\n");
  const args = ["--input-type=module", "-e", child];
  const input = JSON.stringify(cases.map(([args]) => args));
  const done = spawnSync(process.execPath, args, { input, encoding: "utf8" });
  const lines = (done.stdout || "").trim().split("\\n");
  const want = JSON.stringify(cases.map(([, expected]) => expected));
  if (lines[lines.length - 1] !== want) {
    const got = lines[lines.length - 1] || "nothing";
    console.error(`${name}: printed ${got}, want ${want}; ${(done.stderr || "").slice(-500)}`);
    process.exit(1);
  }
  console.log("ok");
}
"""

_JS_SLUGIFY_TEST = (
    "// Hidden test for add-slugify, a judge: runs the agent's worktrial_starter.js in a child, compares its output.\n"
    + _JS_JUDGE
    + """
judge("worktrial_starter.js", "slugify", [
  [["Hello, World!"], "hello-world"],
  [["  many   spaces  "], "many-spaces"],
  [["Already-a-slug"], "already-a-slug"],
  [["v2.0 -- Release_Notes"], "v2-0-release-notes"],
  [["!!!"], ""],
]);
"""
)

_JS_VERSION_TEST = (
    "// Hidden test for fix-version-compare, a judge: the planted bug compares versions as text.\n"
    + _JS_JUDGE
    + """
judge("worktrial_version.js", "isNewer", [
  [["1.10.0", "1.9.2"], true],
  [["1.9.2", "1.10.0"], false],
  [["2.0", "1.99"], true],
  [["1.0.0", "1.0.0"], false],
  [["0.0.2", "0.0.1"], true],
]);
"""
)

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
