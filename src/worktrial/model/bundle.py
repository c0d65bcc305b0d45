"""The suite bundle: the suite file plus the files it declares (``files`` globs), and one digest over all of them.

A published number must pin exactly what was measured. Hidden tests, fixtures and patches that verify commands
read are as much a part of the suite as its JSON, so the bundle digest covers them: it is the SHA-256 of a
canonical listing, one ``<sha256>  <name>`` line per file (``sha256sum`` format, names relative to the suite's
directory, sorted by their UTF-8 bytes), preceded by a version line and the suite file's own digest. A suite that
declares no files keeps ``suite_sha256`` as its bundle digest, so existing results, trust records and runs stay
valid.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from worktrial.errors import SuiteError

BUNDLE_VERSION_LINE = "worktrial-suite-bundle 1\n"
MAX_BUNDLE_FILES = 10_000
MAX_BUNDLE_BYTES = 512 * 1024 * 1024
_CHUNK = 1024 * 1024
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
"""A declared file is read only if it is a regular file: never through a symlink, never blocking on a FIFO."""


@dataclass(frozen=True)
class BundleFile:
    """One declared file: its name relative to the suite directory (POSIX form), digest and size."""

    name: str
    sha256: str
    size: int


def _check_glob(pattern: str, index: int, source: str) -> None:
    where = f"{source}: $.files[{index}]"
    if not pattern.strip():
        raise SuiteError(f'{where}: empty glob; write a pattern such as "hidden/**"')
    if pattern.startswith("/") or "\\" in pattern:
        raise SuiteError(f"{where}: {pattern!r} must be a relative POSIX glob (relative to the suite file)")
    if ".." in PurePosixPath(pattern).parts:
        raise SuiteError(f"{where}: {pattern!r} leaves the suite directory; files must live next to the suite")


def _hash_file(path: Path) -> tuple[str, int]:
    """Digest of a regular file, opened without following a symlink swapped in since it was listed."""
    fd = os.open(path, _READ_FLAGS)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise SuiteError(f"{path}: not a regular file")
        digest = hashlib.sha256()
        size = 0
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _expand(root: Path, pattern: str) -> list[Path]:
    """Glob matches, with a matched directory standing for every file under it (so ``hidden/**`` means all)."""
    out: set[Path] = set()
    for path in root.glob(pattern):
        out.add(path)
        if path.is_dir() and not path.is_symlink():
            out.update(path.rglob("*"))
    return sorted(out)


def collect_bundle(suite_path: Path, patterns: list[str], source: str | None = None) -> tuple[BundleFile, ...]:
    """Every regular file the globs match under the suite's directory, hashed, in canonical order.

    A glob that matches nothing is an error (a typo would otherwise silently leave a hidden test out of the
    digest); symlinks are refused, so the digest always covers the bytes a verify command will read.
    """
    source = source or str(suite_path)
    root = suite_path.resolve().parent
    suite_real = suite_path.resolve()
    names: dict[str, Path] = {}
    for i, pattern in enumerate(patterns):
        _check_glob(pattern, i, source)
        matched = 0
        for path in _expand(root, pattern):
            rel = path.relative_to(root)
            if path.is_symlink() or any(p.is_symlink() for p in list(path.parents)[: len(rel.parts) - 1]):
                raise SuiteError(
                    f"{source}: $.files[{i}]: {rel.as_posix()} is a symlink; bundle files must be regular files "
                    "inside the suite directory"
                )
            if path.is_dir():
                continue
            if path == suite_real:
                continue
            if not path.is_file():
                raise SuiteError(f"{source}: $.files[{i}]: {rel.as_posix()} is not a regular file")
            matched += 1
            names[rel.as_posix()] = path
        if matched == 0:
            raise SuiteError(
                f"{source}: $.files[{i}]: {pattern!r} matches no file under {root}; fix the glob or add the files"
            )
        if len(names) > MAX_BUNDLE_FILES:
            raise SuiteError(f"{source}: $.files: more than {MAX_BUNDLE_FILES} files; declare fewer")
    out: list[BundleFile] = []
    total = 0
    for name in sorted(names, key=lambda n: n.encode("utf-8", "surrogateescape")):
        try:
            sha, size = _hash_file(names[name])
        except OSError as exc:
            raise SuiteError(f"{source}: cannot read bundle file {name}: {exc.strerror}") from None
        total += size
        if total > MAX_BUNDLE_BYTES:
            raise SuiteError(f"{source}: $.files: the declared files exceed {MAX_BUNDLE_BYTES // 2**20} MiB")
        out.append(BundleFile(name=name, sha256=sha, size=size))
    return tuple(out)


def bundle_digest(suite_sha256: str, files: tuple[BundleFile, ...]) -> str:
    """The bundle digest; with no declared files it is the suite file's own digest."""
    if not files:
        return suite_sha256
    listing = BUNDLE_VERSION_LINE + f"{suite_sha256}  <suite>\n"
    listing += "".join(f"{f.sha256}  {f.name}\n" for f in files)
    return hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()


def copy_bundle(suite_path: Path, files: tuple[BundleFile, ...], dest: Path) -> None:
    """Copy exactly the declared files into ``dest``, checking each against its digest, then make it read-only.

    Setup and verify commands read the suite directory through this copy: a file the suite does not declare is
    simply not there, and an edit made after the suite was loaded (or by anything during the run) cannot change
    what is measured without the copy refusing it.
    """
    root = suite_path.resolve().parent
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        target = dest / f.name
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(root / f.name, _READ_FLAGS)
        digest = hashlib.sha256()
        with os.fdopen(fd, "rb") as src, open(target, "wb") as out:
            if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
                raise SuiteError(f"{root / f.name}: not a regular file")
            while chunk := src.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != f.sha256:
            raise SuiteError(
                f"{root / f.name}: changed since the suite was loaded (sha256 {digest.hexdigest()[:12]}, "
                f"expected {f.sha256[:12]}); rerun so the digest covers what is measured"
            )
        mode = stat.S_IMODE(os.stat(root / f.name).st_mode)
        os.chmod(target, 0o555 if mode & 0o111 else 0o444)
    for directory in sorted((p for p in dest.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        os.chmod(directory, 0o555)
    os.chmod(dest, 0o555)
