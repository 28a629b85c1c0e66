"""SSH to a device with the system `ssh`, so ~/.ssh/config aliases, the agent, ProxyJump and known_hosts apply.

Every call is non-interactive (BatchMode=yes) with a connect timeout; every failure becomes one
EdgekitError that says which of the usual things went wrong and what to do about it.
"""

from __future__ import annotations

import io
import json
import shlex
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from edgekit.devices.inventory import Device
from edgekit.errors import EdgekitError

SSH_FAILED = 255  # ssh's own exit status: the connection, not the remote command, failed
NOT_FOUND = 127  # the remote shell found no such program


def ssh_args(device: Device, remote_command: str) -> list[str]:
    """The ssh command line that runs `remote_command` (a shell string) on the device."""
    ssh = shutil.which("ssh")
    if ssh is None:
        raise EdgekitError("no `ssh` client on this machine", hint="install OpenSSH (Debian/Ubuntu: apt install openssh-client)")
    destination, port = device.destination()
    args = [ssh, "-o", "BatchMode=yes", "-o", f"ConnectTimeout={device.timeout_s}"]
    args += ["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]  # a dead link is noticed in ~15 s
    if port:
        args += ["-p", str(port)]
    if device.identity:
        args += ["-i", str(Path(device.identity).expanduser()), "-o", "IdentitiesOnly=yes"]
    for option in device.ssh_options:
        args += ["-o", option]
    return [*args, destination, remote_command]


def manual_command(device: Device) -> str:
    """The ssh command a user can type to reach the device by hand."""
    destination, port = device.destination()
    return f"ssh {f'-p {port} ' if port else ''}{destination}"


def connection_error(device: Device, stderr: str, during: str) -> EdgekitError:
    """ssh's own failure (exit 255) as one line: refused key, unknown host key, unreachable, timeout, lost."""
    text = stderr.strip()
    last = text.splitlines()[-1] if text else "no message"
    dest = device.ssh
    if "Permission denied" in text:
        return EdgekitError(
            f"device '{device.name}' ({dest}) refused the SSH key",
            hint=f"check --identity ({device.identity or 'agent / ~/.ssh defaults'}); install the key there with ssh-copy-id",
        )
    if "Host key verification failed" in text or "host key for" in text.lower():
        return EdgekitError(
            f"the host key of {dest} is not known or has changed",
            hint=f"run `{manual_command(device)}` once to check and accept it (or add --ssh-option StrictHostKeyChecking=accept-new)",
        )
    if "timed out" in text.lower():
        return EdgekitError(
            f"connecting to device '{device.name}' ({dest}) timed out after {device.timeout_s} s",
            hint="check that the board is on and reachable; a slow link needs `devices add ... --timeout SECONDS`",
        )
    if any(s in text for s in ("Connection refused", "No route to host", "Could not resolve", "Network is unreachable", "Name or service")):
        return EdgekitError(
            f"device '{device.name}' ({dest}) is unreachable: {last}",
            hint=f"check the host and port, that sshd runs there, and `{manual_command(device)}`",
        )
    if during != "connect" or any(s in text for s in ("closed by", "Broken pipe", "reset by", "Connection closed")):
        return EdgekitError(
            f"the connection to device '{device.name}' was lost {during}: {last}",
            hint="nothing was recorded; check the board (power, network, dmesg) and run it again",
        )
    return EdgekitError(f"ssh to device '{device.name}' ({dest}) failed: {last}", hint=f"try `{manual_command(device)}` by hand")


def check_ssh_exit(device: Device, code: int, stderr: str, during: str) -> None:
    """Raise for ssh's own failures and for a Python the remote shell cannot find."""
    if code == SSH_FAILED:
        raise connection_error(device, stderr, during)
    if code == NOT_FOUND:
        raise EdgekitError(
            f"no Python at '{device.python}' on device '{device.name}'",
            hint="install Python 3.9+ there (e.g. sudo apt install python3) or `devices add ... --python PATH --replace`",
        )


def run(device: Device, remote_command: str, stdin: bytes = b"", timeout: float | None = None, during: str = "connect") -> bytes:
    """Run a command; its stdout (the command's own failures are left to the caller, ssh's raise here)."""
    try:
        proc = subprocess.run(ssh_args(device, remote_command), input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise EdgekitError(
            f"device '{device.name}' did not answer within {timeout:.0f} s {during}", hint="check the board's load and connection"
        ) from None
    check_ssh_exit(device, proc.returncode, proc.stderr.decode(errors="replace"), during)
    if proc.returncode != 0 and not proc.stdout:
        last = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
        raise EdgekitError(f"device '{device.name}' failed {during}: {last}", hint="run `edgekit devices check` for the device's state")
    return proc.stdout


@dataclass(frozen=True)
class Upload:
    """A folder in the device's cache, named by its content: `kind/SHA`, holding `files` (name -> local path)."""

    key: str
    files: dict[str, Path]

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files.values())


def sync(device: Device, uploads: list[Upload]) -> int:
    """Copy the uploads the device's cache lacks (one round trip to ask, one to copy); the bytes copied."""
    workdir = shlex.quote(remote_workdir(device))
    keys = " ".join(shlex.quote(u.key) for u in uploads)
    ask = f'mkdir -p {workdir} && cd {workdir} && for k in {keys}; do [ -d "$k" ] || echo "missing $k"; done; df -Pk . | tail -n 1'
    lines = run(device, ask, timeout=device.timeout_s + 30).decode().splitlines()
    missing = {ln.split(" ", 1)[1] for ln in lines if ln.startswith("missing ")}
    todo = [u for u in uploads if u.key in missing]
    if not todo:
        return 0
    _check_space(device, lines[-1] if lines else "", sum(u.size() for u in todo))
    _copy(device, workdir, todo)
    return sum(u.size() for u in todo)


def remote_workdir(device: Device) -> str:
    """The cache folder as the remote shell sees it (relative = under the login's home)."""
    return device.workdir[2:] if device.workdir.startswith("~/") else device.workdir


def _check_space(device: Device, df_line: str, needed: int) -> None:
    fields = df_line.split()
    if len(fields) >= 4 and fields[3].isdigit() and int(fields[3]) * 1024 < needed + (1 << 20):
        raise disk_full(device, f"{int(fields[3]) // 1024} MiB free, {needed // (1 << 20) + 1} MiB needed")


def disk_full(device: Device, detail: str) -> EdgekitError:
    return EdgekitError(
        f"the disk of device '{device.name}' is full ({detail})",
        hint=f"free space there (df -h; the cache is {device.workdir}, safe to delete) or use `devices add ... --workdir` elsewhere",
    )


def _copy(device: Device, workdir: str, uploads: list[Upload]) -> None:
    """tar over ssh's stdin into a staging folder, then rename each folder into place: never a half-copied entry."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for upload in uploads:
            for name, path in upload.files.items():
                tar.add(str(path), arcname=f"{upload.key}/{name}")
    moves = " && ".join(f'mkdir -p "$(dirname {shlex.quote(u.key)})" && mv "$T"/{shlex.quote(u.key)} {shlex.quote(u.key)}' for u in uploads)
    script = f'cd {workdir} && T=$(mktemp -d .incoming.XXXXXX) && trap \'rm -rf "$T"\' EXIT && tar -xf - -C "$T" && {moves}'
    try:
        proc = subprocess.run(ssh_args(device, script), input=buffer.getvalue(), capture_output=True, timeout=3600)
    except subprocess.TimeoutExpired:
        raise EdgekitError(f"copying to device '{device.name}' took over an hour", hint="check the link's speed") from None
    stderr = proc.stderr.decode(errors="replace")
    check_ssh_exit(device, proc.returncode, stderr, "while copying the artifact")
    if "No space left" in stderr or "Disk quota" in stderr:
        raise disk_full(device, "tar: no space left")
    if proc.returncode != 0:
        last = (stderr.strip().splitlines() or ["no message"])[-1]
        raise EdgekitError(f"copying to device '{device.name}' failed: {last}", hint=f"check {device.workdir} there is writable")


def decode_reply(device: Device, stdout: bytes) -> tuple[dict, bytes]:
    """The runner's first frame (a JSON line, then its payload)."""
    line, _, rest = stdout.partition(b"\n")
    header = parse_header(device, line)
    return header, rest[: header.get("size", 0)]


def parse_header(device: Device, line: bytes) -> dict:
    """A frame's JSON header line from the device runner, or a clear error when something else answered."""
    try:
        return json.loads(line)
    except ValueError:
        raise EdgekitError(
            f"device '{device.name}' answered something that is not edgekit's runner: {line[:120]!r}",
            hint="check `--python` points at Python 3.9+ and that the login prints nothing to stdout (~/.bashrc)",
        ) from None
