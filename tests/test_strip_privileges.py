"""Files that cross back from a container are inert on the host: no set-uid or set-gid bit, no file capability, no
device node, at any depth, and nothing outside the tree is touched through a link (``ownership.strip_privileges``).

The real container case is in ``test_containers.py``
(``test_a_root_container_agent_leaves_no_set_uid_file_or_device_on_the_host``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import struct
from pathlib import Path

import pytest

from worktrial.isolation.ownership import strip_privileges
from worktrial.isolation.safefs import remove_at

# A version-2 file capability: cap_setuid (bit 7) permitted and effective, as `setcap cap_setuid+ep` writes it.
CAP_SETUID = struct.pack("<IIIII", 0x02000001, 1 << 7, 0, 0, 0)


def _descend(top: Path, depth: int) -> int:
    """A descriptor of ``top/d/d/.../d`` (``depth`` levels, made where missing), reached one level at a time."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        with contextlib.suppress(FileExistsError):
            os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    return fd


DEPTH = 2100  # "d/" 2100 times: longer than any path the kernel takes (4096 bytes)


def test_set_uid_set_gid_and_devices_are_gone_at_any_depth(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    try:
        _check_every_depth(tree, tmp_path)
    finally:
        remove_at(None, str(tree))  # pytest's own clean-up recurses, and a tree this deep would break it


def _check_every_depth(tree: Path, tmp_path: Path) -> None:
    tree.mkdir()
    outside = tmp_path / "outside"
    outside.write_text("not the tree's\n")
    outside.chmod(0o4755)
    modes = {"suid": 0o4755, "sgid": 0o2711, "both": 0o6700, "plain": 0o640}
    for depth in (0, DEPTH):
        fd = _descend(tree, depth)
        try:
            for name, mode in modes.items():
                os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
                os.chmod(name, mode, dir_fd=fd)
            os.symlink(outside, "link", dir_fd=fd)
            if os.geteuid() == 0:
                os.mknod("null", stat.S_IFCHR | 0o666, os.makedev(1, 3), dir_fd=fd)
                os.mknod("disk", stat.S_IFBLK | 0o600, os.makedev(7, 0), dir_fd=fd)
                os.setxattr(f"/proc/self/fd/{fd}/plain", "security.capability", CAP_SETUID)
        finally:
            os.close(fd)
    (tree / "sgid-dir").mkdir()
    (tree / "sgid-dir").chmod(0o2775)
    changed = strip_privileges(tree)
    for depth in (0, DEPTH):
        fd = _descend(tree, depth)
        try:
            found = {name: stat.S_IMODE(os.stat(name, dir_fd=fd).st_mode) for name in modes}
            assert found == {"suid": 0o755, "sgid": 0o711, "both": 0o700, "plain": 0o640}, depth
            assert stat.S_ISLNK(os.stat("link", dir_fd=fd, follow_symlinks=False).st_mode)
            assert not {"null", "disk"} & set(os.listdir(fd))
            if os.geteuid() == 0:
                assert "security.capability" not in os.listxattr(f"/proc/self/fd/{fd}/plain")
        finally:
            os.close(fd)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o4755  # never through a link
    assert stat.S_IMODE((tree / "sgid-dir").stat().st_mode) == 0o2775  # a directory's set-gid gives nothing
    assert changed == (2 * (3 + 2 + 1) if os.geteuid() == 0 else 2 * 3)


def test_a_missing_tree_or_a_link_in_its_place_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "suid").write_text("x\n")
    (target / "suid").chmod(0o4755)
    (tmp_path / "link").symlink_to(target)
    assert strip_privileges(tmp_path / "missing") == 0
    assert strip_privileges(tmp_path / "link") == 0
    assert stat.S_IMODE((target / "suid").stat().st_mode) == 0o4755


@pytest.mark.skipif(os.geteuid() != 0, reason="file capabilities need root")
def test_the_kept_worktree_of_a_root_harness_holds_no_capability(tmp_path: Path) -> None:
    (tmp_path / "tool").write_text("x\n")
    os.setxattr(tmp_path / "tool", "security.capability", CAP_SETUID)
    assert strip_privileges(tmp_path) == 1
    assert os.listxattr(tmp_path / "tool") == []
