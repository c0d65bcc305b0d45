"""A run's live processes on disk, so that the next harness can end them if this one is killed with ``kill -9``.

While a run has processes, ``processes.json`` in its run directory names each of them (pid, create time and
the token of the attempt process it came from), signed with the run's key like every record of the run. A
harness that is killed gets no chance to end its agents; ``worktrial resume`` of that run, and the next
``worktrial eval`` in the same workspace, find the file of every run whose lock nobody holds and end what it
names. Nothing is killed on the file's word alone: the signature must verify (an agent cannot forge a file
naming some unrelated process), and each process must still have the recorded create time and, if it has a
token in its environment, the recorded one (``isolation.tracking.end_leftovers``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from worktrial.isolation.safefs import read_regular
from worktrial.isolation.tracking import ProcIdentity, end_leftovers
from worktrial.state import signing
from worktrial.state.store import LOCK_FILE, list_run_dirs
from worktrial.util import replace_file

log = logging.getLogger(__name__)
PROCESSES_FILE = "processes.json"
_MAX_BYTES = 4 * 1024 * 1024
_KIND = "processes"


class Journal:
    """Keeps ``processes.json`` of one run equal to the run's live processes (removed when there are none)."""

    def __init__(self, run_dir: Path, key: bytes | None = None) -> None:
        self.path = run_dir / PROCESSES_FILE
        self.run_id = run_dir.name
        self._key = key if key is not None else signing.load_key(self.run_id)
        self._last: list[ProcIdentity] | None = None
        self._lock = threading.Lock()
        try:
            self._harness = [os.getpid(), psutil.Process().create_time()]
        except psutil.Error:
            self._harness = [os.getpid(), 0.0]

    def __call__(self, identities: list[ProcIdentity]) -> None:
        with self._lock:
            if identities == self._last:
                return
            self._last = list(identities)
            if not identities:
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                return
            if self._key is None:  # a run stored before signing: a record nobody could verify is no use
                return
            body = json.dumps(
                {"harness": self._harness, "processes": [[i.pid, i.create_time, i.token] for i in identities]},
                sort_keys=True,
            )
            sig = signing.sign(self._key, self.run_id, _KIND, body.encode())
            # Not fsynced: the file is read when the harness died and the machine did not (after a machine's crash
            # none of these processes lives); an fsync here would make every process start wait on the disk.
            replace_file(self.path, json.dumps({"body": body, "sig": sig}) + "\n", durable=False)


@dataclass(frozen=True)
class Ended:
    run_id: str
    processes: int


def _locked_by_someone(run_dir: Path) -> bool:
    """Whether a live process holds the run's lock (its processes are its own business)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(run_dir / LOCK_FILE, flags)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # a lock file we cannot open (a symlink planted there): do not act on this run
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's lock
    return False


def _records(run_dir: Path) -> list[ProcIdentity] | None:
    """The signed records of a run's file; None when there is no file or it does not verify."""
    path = run_dir / PROCESSES_FILE
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        raw: Any = json.loads(read_regular(path, _MAX_BYTES))
        body, sig = raw["body"], raw["sig"]
        key = signing.load_key(run_dir.name)
        if key is None or not isinstance(body, str) or not signing.verify(key, run_dir.name, _KIND, body.encode(), sig):
            log.warning("ignoring %s: it is not signed by the harness of run %s", path, run_dir.name)
            return None
        data = json.loads(body)
        return [ProcIdentity(int(pid), float(ctime), str(token)) for pid, ctime, token in data["processes"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return None


def end_previous(state_root: Path, *, own: Path | None = None) -> list[Ended]:
    """End what killed harnesses left running in this state root; ``own`` is a run this process holds the lock of.

    Each run's file is removed once dealt with (an unverifiable one too: it can never be acted on).
    """
    ended: list[Ended] = []
    for run_dir in list_run_dirs(state_root):
        path = run_dir / PROCESSES_FILE
        if not os.path.lexists(path):
            continue
        if run_dir != own and _locked_by_someone(run_dir):
            continue
        records = _records(run_dir)
        if records:
            count = end_leftovers(records)
            if count:
                ended.append(Ended(run_dir.name, count))
        with contextlib.suppress(OSError):
            path.unlink()
    return ended


def describe(ended: list[Ended]) -> str | None:
    """The one line a run logs about what it ended, or None."""
    if not ended:
        return None
    total = sum(e.processes for e in ended)
    runs = ", ".join(e.run_id for e in ended)
    return (
        f"ended {total} process(es) left running by a killed worktrial (run {runs}); "
        "a harness killed with kill -9 cannot end its agents itself"
    )
