"""Every place the harness runs git, with why it may: a new one fails this test until it is reviewed and listed.

The rule (docs/security.md, "The harness's own git"): the harness never runs git, or anything, on state an agent or
the evaluated repository's code could have shaped, outside a sandbox, unless with a git directory, config and
index only the harness ever wrote. Each entry below says which of these holds.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "worktrial"
GIT_HELPERS = {"git", "_git", "_git_out"}

REVIEWED = {
    # The helpers themselves.
    "isolation/workspace.py:git": "the one helper: hooks off, no prompts; callers below",
    "isolation/workspace.py:_git_out": "the helper's raising form",
    "isolation/patch.py:_git": "the patch's helper: a git dir, config and index only the harness writes",
    # The user's repository and the harness's own caches: no agent or evaluated code has run there.
    "isolation/workspace.py:find_workspace": "the user's own repository, before any attempt",
    "isolation/workspace.py:open_source": "the user's own repository, before any attempt",
    "isolation/workspace.py:materialize_source": "a bundle cloned into the harness's cache",
    "isolation/workspace.py:resolve_commit": "the user's own repository, before any attempt",
    "isolation/workspace.py:tracked_in": "the user's own repository, before any attempt",
    "isolation/workspace.py:uncommitted": "the user's own repository, before any attempt",
    "isolation/workspace.py:tree_digest": "the user's own repository (or a pinned clone in the harness's cache), "
    "before any attempt: rev-parse of a base commit's tree",
    "isolation/workspace.py:_hash_tree": "ls-tree of a base commit's trees, as tree_digest",
    "isolation/workspace.py:fetch_pinned": "a pinned repository cloned into the harness's cache",
    "isolation/workspace.py:create_attempt_workspace": "a private repository the harness creates, before any agent",
    "isolation/gitbundle.py:create_bundle": "a scratch bare repository of the harness's, from the user's objects",
    # Attempt state.
    "isolation/copying_slot.py:CopyingSlot._git_reset": "after restoring the private git dir (config, index) from "
    "the harness's snapshot",
    "isolation/verifier.py:_agent_commit": "cat-file of the agent's HEAD after enter restored the private git dir "
    "from the harness's snapshot: its config, its alternates (the agent's objects listed last)",
    "isolation/verifier.py:_read_tree": "enter's index for the room (read-tree; clean -X of ignored files), in the "
    "private git dir restored from the harness's snapshot",
    "isolation/patch.py:_harness_git_dir": "the harness's own patch git dir (read-tree of the start commit)",
    "isolation/patch.py:_patch": "the harness's own patch git dir; drivers undefined, worktree by checked descriptor",
    "isolation/patch.py:staged_patch": "diff --no-index of two trees the harness staged; no repository, no config",
    "isolation/patch.py:apply_change": "regrade's apply of a stored change (its digest in the signed record) to a "
    "fresh checkout of its base: outside any repository (no git dir, no config), so nothing of the tree's git "
    "metadata is read; git refuses paths beyond a symlink or out of the tree",
    "isolation/patch.py:_ignored_files": "check-ignore in the harness's own patch git dir, as _patch: the worktree's "
    ".gitignore files are read as patterns only (what `add -A` there reads too); no driver, hook or excludes file",
    "isolation/basetree.py:_batch": "cat-file --batch on the slot's private git dir after the harness restored it",
    "isolation/change.py:_ignored": "check-ignore in a git dir the harness wrote, on .gitignore files it copied out",
    "isolation/environment.py:_head": "before the setup commands ran: the private repository as the harness made it",
    "isolation/environment.py:commit_result": "inside the attempt's sandbox, after the harness's config is restored",
    "isolation/environment.py:_git_line": "commit_result's steps (add, write-tree, commit-tree, update-ref): in the "
    "attempt's sandbox, after the harness's config is restored",
    "isolation/env_cache.py:EnvironmentCache.store": "tree-to-tree listing after the harness's config is restored",
    "isolation/env_cache.py:_tree": "ls-tree of the pinned commit before the setup commands ran (the cache key, and "
    "whether an entry still fits): the private repository as the harness made it",
    "isolation/env_cache.py:EnvironmentCache._still_valid": "rev-parse before the setup commands ran, as _tree",
    "isolation/env_cache.py:_pack": "pack-objects after the harness's config is restored, reading only the objects "
    "the harness's own commit wrote; the worktree is not read",
    # `worktrial check`: the suite's own solution (trusted with the suite) in a slot of the harness's.
    "engine/check_rebuild.py:_changed_files": "check runs only the trusted oracle and nop agents",
    "engine/check_rebuild.py:_modified_tracked": "check runs only the trusted oracle and nop agents",
}


def _git_call_sites() -> set[str]:
    sites: set[str] = set()
    for path in sorted(SRC.rglob("*.py")):
        _visit(ast.parse(path.read_text(), str(path)), [], path.relative_to(SRC).as_posix(), sites)
    return sites


def _visit(node: ast.AST, scope: list[str], rel: str, sites: set[str]) -> None:
    """Note the enclosing function of every call of a git helper and every argv list that starts with "git"."""
    for child in ast.iter_child_nodes(node):
        inner = [*scope, child.name] if isinstance(child, (ast.FunctionDef, ast.ClassDef)) else scope
        if isinstance(child, ast.Call):
            func = child.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in GIT_HELPERS:
                sites.add(f"{rel}:{'.'.join(scope)}")
        if isinstance(child, ast.List) and child.elts:
            first = child.elts[0]
            if isinstance(first, ast.Constant) and first.value == "git":
                sites.add(f"{rel}:{'.'.join(scope)}")
        _visit(child, inner, rel, sites)


def test_every_git_call_of_the_harness_is_reviewed() -> None:
    found = _git_call_sites()
    unreviewed = sorted(found - set(REVIEWED))
    assert not unreviewed, (
        f"new places run git: {unreviewed}. Check them against the rule in this file's docstring (never on agent- "
        "or repository-shaped state outside a sandbox unless with a git dir, config and index only the harness "
        "wrote) and list them in REVIEWED with the reason"
    )
    assert not sorted(set(REVIEWED) - found), "REVIEWED names places that no longer run git: remove them"
