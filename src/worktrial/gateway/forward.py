"""Runs a program with the gateway's port forwarded into its network namespace (standard library only).

A sandboxed attempt has a network namespace of its own (``--network off``: loopback only; ``on``: outbound
through slirp4netns, the host's loopback out of reach), so the gateway's 127.0.0.1 port on the host is not there.
Its unix socket is: the sandbox shows the socket's directory. The harness runs the agent's program as

    python -I -S forward.py PORT SOCKET -- PROGRAM ARGS...

inside the sandbox; this listens on the namespace's own 127.0.0.1:PORT, relays every connection to SOCKET, runs
the program (same stdin, stdout and stderr), passes SIGTERM/SIGINT/SIGHUP on to it and exits with its status.
The gateway's URL is then the same inside the sandbox as outside. The file is copied next to the socket and run
from there, so it imports nothing of worktrial.

A container's network namespace is entered from the host instead (``nsenter --net``), where the socket's path is
this host's: ``forward.py PORT SOCKET --ready FD`` only listens and relays, writes one byte to FD once it listens,
and runs until it is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

SCRIPT_NAME = "forward.py"
_CHUNK = 64 * 1024


def script_text() -> str:
    """This module's source: the script the sandbox runs."""
    return Path(__file__).read_text(encoding="utf-8")


def _pump(source: socket.socket, target: socket.socket, done: threading.Semaphore) -> None:
    try:
        while data := source.recv(_CHUNK):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)
        done.release()


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    done = threading.Semaphore(0)
    threading.Thread(target=_pump, args=(client, upstream, done), daemon=True).start()
    threading.Thread(target=_pump, args=(upstream, client, done), daemon=True).start()
    done.acquire()
    done.acquire()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_relay, args=(client, path), daemon=True).start()


def _listen(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted connections inherit it
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    return listener


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[2] == "--ready":
        listener = _listen(int(argv[0]))
        ready = int(argv[3])
        os.write(ready, b"1")
        os.close(ready)
        _serve(listener, argv[1])
        return 0
    if len(argv) < 4 or argv[2] != "--":
        print("usage: forward.py PORT SOCKET -- PROGRAM [ARGS...] | forward.py PORT SOCKET --ready FD", file=sys.stderr)
        return 2
    port, path, program = int(argv[0]), argv[1], argv[3:]
    listener = _listen(port)
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    try:
        child = subprocess.Popen(program)
    except OSError as exc:
        print(f"{program[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
