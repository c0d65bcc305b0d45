"""Limits on a pure cgroup v2 machine: one cgroup holds both limits and is also the one that ends each command.

This machine mounts memory and pids as cgroup v1 controllers, so the kernel's v2 interface cannot be created here;
these tests give the Enforcer a directory laid out as a delegated cgroup v2 subtree is (``cgroup.subtree_control``
naming the controllers, interface files written by name) and check what it creates and what a command joins. No
process is started in the fake tree. On a v1 machine the real cgroups are covered by ``test_sandbox.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from worktrial.isolation import limits, proc
from worktrial.isolation.limits import Enforcer, Limits
from worktrial.isolation.sandbox import Unconfined


@pytest.fixture
def v2_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The harness's own cgroup in a v2 hierarchy with memory and pids delegated to its children."""
    root = tmp_path / "cgroup"
    own = root / "user.slice" / "harness"
    own.mkdir(parents=True)
    (own / "cgroup.subtree_control").write_text("memory pids\n")
    monkeypatch.setattr(limits, "_CGROUP_ROOT", root)
    monkeypatch.setattr(limits, "_own_cgroup", lambda controller: "/user.slice/harness" if controller == "" else None)
    return own


def test_both_limits_live_in_one_v2_group(v2_tree: Path) -> None:
    """A group per controller would make the second one fail (same name) or move the process out of the first."""
    enforcer = Enforcer(Limits(max_memory=256 * 1024**2, max_procs=32))
    enforcer.prepare()  # (no cleanup: a plain directory with files in it cannot be rmdir-ed as a cgroup can)
    assert enforcer.mechanism == "cgroup"
    group = enforcer.v2_group
    assert group is not None and group.parent == v2_tree
    assert (group / "memory.max").read_text() == str(256 * 1024**2)
    assert (group / "memory.swap.max").read_text() == "0"
    assert (group / "pids.max").read_text() == "32"
    assert [p for p in v2_tree.iterdir() if p.is_dir()] == [group]
    # Joined once, and no ulimit fallback for either limit.
    script = enforcer.prefix()[2]
    assert script.count("cgroup.procs") == 1 and "ulimit" not in script
    (group / "pids.events").write_text("max 3\n")
    assert enforcer.hit() == "attempt hit --max-procs 32"


def test_an_unsandboxed_command_is_ended_with_the_attempts_limits_group(v2_tree: Path) -> None:
    """The tracked command joins the limits group (through the limits' prefix) and that group is what the tracker
    kills at its end; it is not given a cgroup of its own that the prefix would then move it out of."""
    enforcer = Enforcer(Limits(max_procs=8))
    enforcer.prepare()
    sandbox = Unconfined(enforcer)
    cgroup, owned = proc._kill_cgroup("token", sandbox, sweep=True)
    assert cgroup == enforcer.v2_group and not owned
    assert proc._kill_cgroup("token", sandbox, sweep=False) == (None, False)
    argv = sandbox.wrap(["true"], Path("/"), {}).argv
    assert f"{enforcer.v2_group}/cgroup.procs" in argv[2]


def test_without_v2_controllers_each_limit_falls_back_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "_CGROUP_ROOT", tmp_path / "none")
    monkeypatch.setattr(limits, "_own_cgroup", lambda controller: None)
    enforcer = Enforcer(Limits(max_memory=64 * 1024**2, max_procs=8))
    enforcer.prepare()
    assert enforcer.mechanism == "rlimit" and enforcer.v2_group is None
    assert "ulimit -v" in enforcer.prefix()[2] and "ulimit -u 8" in enforcer.prefix()[2]
