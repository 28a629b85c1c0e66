"""A real OpenSSH server on 127.0.0.1 and minimal "device" Pythons, for the device tests (no mocks).

sshd runs as this user with a temporary host key and one authorized key (StrictModes no, UsePAM no).
The device Python is a separate virtualenv with only numpy, onnxruntime and ai-edge-litert (pinned
by constraints.txt), cached under ~/.cache/edgekit-test-device-venv/ and reused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = Path("/usr/sbin/sshd")
DEVICE_PACKAGES = ("numpy", "onnxruntime", "ai-edge-litert")
CONSTRAINTS = Path(__file__).resolve().parents[1] / "constraints.txt"


@dataclass
class Sshd:
    """A running sshd and what a client needs to reach it."""

    proc: subprocess.Popen
    port: int
    key: Path  # the authorized client key
    known_hosts: Path
    folder: Path

    @property
    def destination(self) -> str:
        return f"{os.environ.get('USER') or 'root'}@127.0.0.1:{self.port}"

    def ssh_options(self) -> list[str]:
        return ["--ssh-option", f"UserKnownHostsFile={self.known_hosts}", "--ssh-option", "StrictHostKeyChecking=yes"]

    def sshd_pids(self) -> list[int]:
        """The listener and every sshd process below it (per-connection monitors and sessions), not the commands they run."""
        children: dict[int, list[int]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
            except (OSError, ValueError):
                continue
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            if _is_sshd(pid):
                found.append(pid)
                todo.extend(children.get(pid, []))
        return found

    def kill(self) -> None:
        """Kill sshd and its sessions, as a crashed or rebooted board would: the commands they ran lose their parent."""
        for pid in self.sshd_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


def _is_sshd(pid: int) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/exe")).name.startswith("sshd")
    except OSError:
        return False


def sshd_unavailable() -> str | None:
    """Why no sshd can be started here, or None."""
    if not SSHD.exists():
        return f"{SSHD} is not installed (Debian: apt-get install openssh-server; .ci/run does it)"
    if not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "the OpenSSH client (ssh, ssh-keygen) is not installed"
    return None


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sshd(folder: Path) -> Sshd:
    """Start sshd on a free loopback port; raises RuntimeError with sshd's own message if it cannot start."""
    folder.mkdir(parents=True, exist_ok=True)
    host_key, client_key = keygen(folder / "host_key"), keygen(folder / "client_key")
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        f"PidFile {folder / 'sshd.pid'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nLogLevel ERROR\n"
    )
    public = (folder / "host_key.pub").read_text().split()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {public[0]} {public[1]}\n")
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privilege-separation folder
    log = open(folder / "sshd.log", "wb")  # noqa: SIM115 (kept open for sshd's lifetime)
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {(folder / 'sshd.log').read_text().strip()[-300:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return Sshd(proc, port, client_key, folder / "known_hosts", folder)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("sshd did not listen within 10 s")


def stop_sshd(server: Sshd) -> None:
    if server.proc.poll() is None:
        server.kill()


def pinned_packages() -> list[str]:
    """The device packages with their versions from constraints.txt."""
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        name, eq, version = line.strip().partition("==")
        if eq:
            pins[name.lower()] = version
    return [f"{p}=={pins[p]}" if p in pins else p for p in DEVICE_PACKAGES]


def device_venv() -> Path:
    """The minimal device Python (numpy, onnxruntime, ai-edge-litert), created once per set of versions."""
    packages = pinned_packages()
    key = hashlib.sha256(f"{sys.version_info[:2]} {packages}".encode()).hexdigest()[:12]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgekit-test-device-venv"
    final = root / f"py{sys.version_info[0]}{sys.version_info[1]}-{key}"
    if (final / "ok").exists():
        return final / "bin" / "python"
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        subprocess.run([_base_python(), "-m", "venv", str(staging / "venv")], check=True, capture_output=True)
        pip = [str(staging / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, "-c", str(CONSTRAINTS), *packages], check=True, capture_output=True, timeout=900)
        (staging / "venv" / "ok").write_text(" ".join(packages))
        if not (final / "ok").exists():
            shutil.rmtree(final, ignore_errors=True)
            # only a finished venv gets the final name (bin/python finds its packages after the move; pip's shebang would not)
            os.replace(staging / "venv", final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final / "bin" / "python"


def _base_python() -> str:
    """A Python that is not inside this project's venv, so the device venv cannot see its packages."""
    return getattr(sys, "_base_executable", None) or sys.executable


def bare_python(folder: Path) -> Path:
    """A Python with nothing installed, not even pip: the device with no numpy."""
    subprocess.run([_base_python(), "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True)
    return folder / "bin" / "python"
