"""The device inventory: `$EDGEKIT_DEVICES`, else ~/.config/edgekit/devices.yaml, written atomically."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from edgekit.errors import EdgekitError
from edgekit.fileio import atomic_output

VERSION = 1
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Device:
    """A board reachable over SSH, how to run Python there, and what `devices check` found."""

    name: str
    ssh: str  # [USER@]HOST[:PORT]; HOST may be an alias from ~/.ssh/config
    identity: str | None = None
    python: str = "python3"
    workdir: str = ".cache/edgekit"  # relative paths are under the login's home
    ssh_options: tuple[str, ...] = ()  # extra `-o KEY=VALUE` for ssh
    timeout_s: int = 10  # ssh ConnectTimeout
    taskset: str | None = None  # cores to pin the runner to (taskset -c), e.g. "2,3"
    cooldown_s: float = 0.0  # idle seconds before each timed run
    preset: str | None = None
    facts: dict = field(default_factory=dict)  # the last `devices check`
    checked: str | None = None

    def destination(self) -> tuple[str, int | None]:
        """(USER@HOST or HOST, port or None) from `ssh`."""
        user, at, rest = self.ssh.rpartition("@")
        host, port = _split_port(rest)
        return (f"{user}@{host}" if at else host), port

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("name")
        data["ssh_options"] = list(self.ssh_options)
        return {k: v for k, v in data.items() if v not in (None, {}, [])}


def _split_port(host: str) -> tuple[str, int | None]:
    if host.startswith("["):  # [::1]:2222
        inner, _, after = host[1:].partition("]")
        return inner, int(after[1:]) if after.startswith(":") and after[1:].isdigit() else None
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        return name, int(port)
    return host, None


def inventory_path() -> Path:
    """Where the inventory lives."""
    return Path(os.environ.get("EDGEKIT_DEVICES") or Path.home() / ".config" / "edgekit" / "devices.yaml")


def load_devices() -> dict[str, Device]:
    """Every device in the inventory, by name (none if the file does not exist)."""
    import yaml

    path = inventory_path()
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise EdgekitError(f"the device inventory {path} is not valid YAML: {str(exc).splitlines()[0]}", hint="fix or delete it") from None
    known = {f.name for f in fields(Device)}
    devices = {}
    for name, entry in (data.get("devices") or {}).items():
        entry = {k: v for k, v in (entry or {}).items() if k in known}
        entry["ssh_options"] = tuple(entry.get("ssh_options") or ())
        devices[str(name)] = Device(name=str(name), **entry)
    return devices


def save_devices(devices: dict[str, Device]) -> Path:
    import yaml

    path = inventory_path()
    body = {"version": VERSION, "devices": {name: d.to_dict() for name, d in sorted(devices.items())}}
    with atomic_output(path) as tmp:
        tmp.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def get_device(name: str) -> Device:
    """The device called `name`, or an error naming the ones there are."""
    devices = load_devices()
    if name not in devices:
        known = ", ".join(devices) or "none yet"
        raise EdgekitError(
            f"no device '{name}' in {inventory_path()} (known: {known})", hint=f"add it: edgekit devices add {name} --ssh USER@HOST"
        )
    return devices[name]


def add_device(device: Device, replace_existing: bool = False) -> Path:
    if not NAME.match(device.name):
        raise EdgekitError(f"device name '{device.name}' is not allowed", hint="use letters, digits, '-', '_' and '.'")
    devices = load_devices()
    if device.name in devices and not replace_existing:
        raise EdgekitError(f"device '{device.name}' exists already", hint="pass --replace, or remove it first")
    devices[device.name] = device
    return save_devices(devices)


def remove_device(name: str) -> Path:
    devices = load_devices()
    get_device(name)
    del devices[name]
    return save_devices(devices)


def record_facts(name: str, facts: dict, checked: str) -> Device:
    """Store what `devices check` found."""
    devices = load_devices()
    devices[name] = replace(get_device(name), facts=facts, checked=checked)
    save_devices(devices)
    return devices[name]


def device_facts(name: str) -> dict:
    """The probed facts of a device (arch, isa, cpu, runtimes ...), for choices made for it (e.g. an int8 scheme).

    Empty until `edgekit devices check NAME` has run.
    """
    return dict(get_device(name).facts)
