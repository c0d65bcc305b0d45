"""Harbor and worktrial on the same Harbor task directories and the same local images: a verdict table.

Harbor (>= 0.25) needs Python >= 3.12, so it runs from a Debian trixie chroot (mmdebstrap) with Debian's docker CLI
and compose plugin, talking to `podman system service` on this host over a unix socket (runc and explicit rlimits
set in the service's containers.conf, as `isolation/container.py`'s probe finds this machine needs). Where the
tasks' registries cannot be reached, stand-in base images are built with mmdebstrap and tagged with the names the
tasks' Dockerfiles start `FROM`; each task's `docker_image` is then built from its own `environment/` on top of them
and tagged with that name, so Harbor (which pulls only what is absent) and worktrial run the very same image ids.
Stand-ins carry what the tasks' test.sh would download from hosts other than PyPI/Debian: `uv` (from its PyPI
wheel) at `$HOME/.local/bin` with the `env` file its installer writes, and a Python 3.13 for `uvx -p 3.13`.

    .venv/bin/python benchmarks/harbor_side_by_side.py --dataset /work/tb2/dataset              # everything
    .venv/bin/python benchmarks/harbor_side_by_side.py --dataset DIR --only worktrial --agents oracle
    .venv/bin/python benchmarks/harbor_side_by_side.py --dataset DIR --setup-only               # chroot, socket, images

Steps are idempotent: a chroot, image or service already there is reused. Everything lives under --work. The
printed table has one row per task: Harbor's reward and worktrial's outcome for each agent, and whether they agree.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIRROR = "http://deb.debian.org/debian"
HARBOR_VERSION = "0.26.0"
UV_VERSION = "0.9.5"
CHROOT_PACKAGES = "python3,python3-venv,ca-certificates,docker-cli,docker-compose,git"

# Base image named by a task's Dockerfile -> (Debian suite, extra packages) of its stand-in. The stand-ins are
# Debian, not the images themselves: package names mostly agree, versions do not.
STAND_INS: dict[str, tuple[str, str]] = {
    "python:3.13-slim-bookworm": ("trixie", "python3,python3-pip,python3-venv"),
    "python:3.11-slim": ("bookworm", "python3,python3-pip,python3-venv"),
    "python:3.10-slim-bookworm": ("bookworm", "python3,python3-pip,python3-venv"),
    "python:3.11": ("bookworm", "python3,python3-pip,python3-venv,git,curl"),
    "ubuntu:24.04": ("trixie", "python3"),
    "debian:13.0-slim": ("trixie", "python3"),
    "debian:bullseye-slim": ("bullseye", "python3"),
}
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
CHROOT_ENV = {
    "PATH": "/opt/harbor/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "DOCKER_HOST": "unix:///run/podman.sock",
    "PIP_CERT": HOST_CA,
    "SSL_CERT_FILE": HOST_CA,
    "REQUESTS_CA_BUNDLE": HOST_CA,
}
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
"""


def sh(argv: list[str], *, check: bool = True, env: dict[str, str] | None = None, **kw: object) -> int:
    print("+", " ".join(shlex.quote(a) for a in argv), file=sys.stderr)
    return subprocess.run(argv, check=check, env=env, **kw).returncode  # type: ignore[call-overload, no-any-return]


def out(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout.strip()


def build_chroot(work: Path, version: str) -> Path:
    """A Debian trixie chroot with Harbor in /opt/harbor and Debian's docker CLI + compose plugin."""
    root = work / "trixie-chroot"
    if not (root / "usr/bin/docker").exists():
        sh(["mmdebstrap", "--variant=apt", f"--include={CHROOT_PACKAGES}", "trixie", str(root), MIRROR])
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    # This host's CA bundle: a network whose proxy inspects TLS has its own root in it.
    shutil.copy(HOST_CA, root / "etc/ssl/certs/ca-certificates.crt")
    if not (root / "opt/harbor/bin/harbor").exists():
        sh(["chroot", str(root), "python3", "-m", "venv", "/opt/harbor"], env=CHROOT_ENV)
        sh(["chroot", str(root), "/opt/harbor/bin/pip", "install", "--quiet", f"harbor=={version}"], env=CHROOT_ENV)
    return root


def start_service(work: Path, chroot: Path) -> Path:
    """`podman system service` on a socket inside the chroot (``/run/podman.sock`` there); its containers.conf."""
    conf = work / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    sock = chroot / "run/podman.sock"
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    if sock.exists() and sh(["podman", "--url", f"unix://{sock}", "info"], check=False, stdout=subprocess.DEVNULL) == 0:
        return conf
    sock.unlink(missing_ok=True)
    log = (work / "podman-service.log").open("ab")
    subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"], env=env, stdout=log, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    for _ in range(100):
        if sock.exists():
            return conf
        time.sleep(0.1)
    raise SystemExit(f"podman system service did not create {sock}")


def uv_wheel(work: Path) -> Path:
    found = sorted((work / "pkgs").glob(f"uv-{UV_VERSION}-*.whl"))
    if found:
        return found[0]
    sh([sys.executable, "-m", "pip", "download", f"uv=={UV_VERSION}", "--no-deps", "--only-binary=:all:",
        "--platform", "manylinux_2_17_x86_64", "--python-version", "3.12", "-d", str(work / "pkgs")])  # fmt: skip
    return sorted((work / "pkgs").glob(f"uv-{UV_VERSION}-*.whl"))[0]


def stand_in(work: Path, name: str) -> None:
    """Build the stand-in for base image ``name`` (mmdebstrap | podman import) unless it is there."""
    full = f"docker.io/library/{name}"
    if out(["podman", "image", "inspect", "--format", "{{.Id}}", full]):
        return
    suite, packages = STAND_INS[name]
    wheel = uv_wheel(work)
    # uv where its installer would put it, and the env file test.sh sources; a `python`/`pip` on PATH and no
    # EXTERNALLY-MANAGED marker, as in the python:* images (whose pip installs into the system's Python).
    hook = (
        'mkdir -p "$1/root/.local/bin" && cd "$1/root/.local/bin" && python3 -c "import sys, zipfile; '
        "z = zipfile.ZipFile(sys.argv[1]); [open(n.rsplit('/', 1)[1], 'wb').write(z.read(n)) for n in z.namelist() "
        "if '.data/scripts/' in n]\" " + shlex.quote(str(wheel)) + " && chmod 755 uv uvx && "
        "printf 'export PATH=\"$HOME/.local/bin:$PATH\"\\n' > env && "
        'rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED && '
        f'cp {HOST_CA} "$1/etc/ssl/certs/ca-certificates.crt" && '
        'for p in python pip; do [ -e "$1/usr/bin/${p}3" ] && ln -sf "/usr/bin/${p}3" "$1/usr/local/bin/$p"; done; '
        "true"
    )
    tar = work / f"stand-in-{name.replace(':', '-').replace('/', '-')}.tar"
    sh(["mmdebstrap", "--variant=apt", f"--include=ca-certificates,{packages}", f"--customize-hook={hook}",
        "--format=tar", suite, str(tar), MIRROR])  # fmt: skip
    sh(["podman", "import", "--change", "CMD=/bin/bash", "--change", "ENV=PATH=/usr/local/sbin:/usr/local/bin:"
        "/usr/sbin:/usr/bin:/sbin:/bin", "--change", "ENV=UV_NATIVE_TLS=1", str(tar), full])  # fmt: skip
    tar.unlink()


def task_dirs(dataset: Path) -> list[Path]:
    return sorted(d for d in dataset.iterdir() if (d / "task.toml").is_file())


def task_images(work: Path, dataset: Path) -> None:
    """Every task's ``docker_image``, built from its ``environment/`` on the stand-ins when absent."""
    for task in task_dirs(dataset):
        config = tomllib.loads((task / "task.toml").read_text())
        image = config.get("environment", {}).get("docker_image")
        dockerfile = task / "environment" / "Dockerfile"
        if not image or not dockerfile.is_file():
            continue
        if "/" in image and "." not in image.split("/")[0] and ":" not in image.split("/")[0]:
            image = f"docker.io/{image}"  # what Docker's API (Harbor's compose) looks a short name up as
        if out(["podman", "image", "inspect", "--format", "{{.Id}}", image]):
            continue
        for line in dockerfile.read_text().splitlines():
            if line.upper().startswith("FROM "):
                stand_in(work, line.split()[1])
        built = sh(["podman", "build", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "-t", image,
                    str(task / "environment")], check=False)  # fmt: skip
        if built != 0:
            print(f"{task.name}: its image could not be built here; both harnesses will fail it", file=sys.stderr)


def run_harbor(work: Path, chroot: Path, dataset: Path, agent: str, jobs: int) -> dict[str, float | None]:
    """Harbor's verdict per task: its reward, None where the trial has none."""
    inside = Path("/work-dataset")
    mount = chroot / inside.relative_to("/")
    mount.mkdir(exist_ok=True)
    if not os.path.ismount(mount):
        sh(["mount", "--bind", str(dataset), str(mount)])
    jobs_dir = f"/harbor-jobs/{agent}-{int(time.time())}"
    env = CHROOT_ENV
    for sub in ("proc", "dev"):
        if not os.path.ismount(chroot / sub):
            sh(["mount", "--bind", f"/{sub}", str(chroot / sub)])
    sh(["chroot", str(chroot), "harbor", "run", "--path", str(inside), "--agent", agent, "--n-concurrent",
        str(jobs), "--jobs-dir", jobs_dir, "--yes"], check=False, env=env)  # fmt: skip
    rewards: dict[str, float | None] = {}
    for result in (chroot / jobs_dir.lstrip("/")).glob("*/*/result.json"):
        data = json.loads(result.read_text())
        task = data.get("task_name") or result.parent.name.rsplit("__", 1)[0]
        verifier = data.get("verifier_result") or {}
        value = (verifier.get("rewards") or {}).get("reward")
        rewards[str(task).rsplit("/", 1)[-1]] = float(value) if isinstance(value, int | float) else None
    return rewards


def run_worktrial(work: Path, dataset: Path, agent: str, jobs: int) -> dict[str, tuple[str, float | None]]:
    """worktrial's outcome and reward per task."""
    ws = work / "ws"
    if not (ws / ".git").exists():
        ws.mkdir(parents=True, exist_ok=True)
        sh(["git", "init", "-q", str(ws)])
        sh(["git", "-C", str(ws), "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q", "--allow-empty",
            "-m", "base"])  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "worktrial", "eval", "--suite", str(dataset), "--agent", agent, "--trust",
         "--workspace", str(ws), "--runtime", "podman", "--jobs", str(jobs), "--format", "json", "--quiet"],
        capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    if not result.stdout.strip():
        print(result.stderr, file=sys.stderr)
        return {}
    envelope = json.loads(result.stdout)
    return {
        t["task_id"]: (t["attempts"][0]["outcome"], t["attempts"][0].get("reward")) for t in envelope["report"]["tasks"]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", type=Path, required=True, help="a directory of Harbor task directories")
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/worktrial-harbor"))
    parser.add_argument("--harbor-version", default=HARBOR_VERSION)
    parser.add_argument("--agents", default="oracle,nop")
    parser.add_argument("--only", choices=("harbor", "worktrial"), default=None)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--setup-only", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: it builds a chroot and bind-mounts into it")
    args.work.mkdir(parents=True, exist_ok=True)
    dataset = args.dataset.resolve()
    chroot = build_chroot(args.work, args.harbor_version) if args.only != "worktrial" else None
    if chroot is not None:
        start_service(args.work, chroot)
    task_images(args.work, dataset)
    if args.setup_only:
        return
    tasks = [d.name for d in task_dirs(dataset)]
    rows: dict[str, dict[str, str]] = {t: {} for t in tasks}
    for agent in args.agents.split(","):
        started = time.perf_counter()
        if chroot is not None:
            for task, reward in run_harbor(args.work, chroot, dataset, agent, args.jobs).items():
                rows.setdefault(task, {})[f"harbor {agent}"] = "-" if reward is None else f"{reward:g}"
            print(f"harbor {agent}: {time.perf_counter() - started:.0f} s wall", file=sys.stderr)
        started = time.perf_counter()
        if args.only != "harbor":
            for task, (outcome, reward) in run_worktrial(args.work, dataset, agent, args.jobs).items():
                rows.setdefault(task, {})[f"worktrial {agent}"] = f"{outcome} {'' if reward is None else f'{reward:g}'}"
            print(f"worktrial {agent}: {time.perf_counter() - started:.0f} s wall", file=sys.stderr)
    columns = sorted({c for row in rows.values() for c in row})
    print("| task | " + " | ".join(columns) + " | agree |")
    print("|---" * (len(columns) + 2) + "|")
    for task in sorted(rows):
        row = rows[task]
        agree = []
        for agent in args.agents.split(","):
            h, w = row.get(f"harbor {agent}"), row.get(f"worktrial {agent}")
            if h is not None and w is not None:
                agree.append("yes" if (h == "1") == w.startswith("pass") else f"NO ({agent})")
        print(f"| {task} | " + " | ".join(row.get(c, "") for c in columns) + f" | {', '.join(agree)} |")


if __name__ == "__main__":
    main()
