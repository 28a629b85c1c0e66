"""`edgekit devices add|list|remove|check`: boards reachable over SSH, used as targets `RUNTIME:DEVICE@NAME`."""

from __future__ import annotations

import datetime as dt
import json

import typer

from edgekit.devices.inventory import Device, add_device, get_device, inventory_path, load_devices, record_facts, remove_device
from edgekit.devices.presets import get_preset, install_hint

devices_app = typer.Typer(
    help="Edge boards over SSH: add, list, remove, check. Use one as a target: onnxruntime:cpu@NAME.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(devices_app, name="devices")


@devices_app.command("add")
def add(
    name: str = typer.Argument(..., help="A short name, used in targets as RUNTIME:DEVICE@NAME."),
    ssh: str = typer.Option(..., "--ssh", help="[USER@]HOST[:PORT]; HOST may be an alias from ~/.ssh/config."),
    identity: str = typer.Option(None, "--identity", help="Private key file (default: the agent and ~/.ssh)."),
    python: str = typer.Option(None, "--python", help="Python 3.9+ on the device with numpy and the runtimes [default: python3]."),
    workdir: str = typer.Option(
        None, "--workdir", help="Cache folder on the device (relative = under its home) [default: .cache/edgekit]."
    ),
    preset: str = typer.Option(None, "--preset", help="Fill in defaults for a known board: raspberry-pi-5, jetson-orin, intel-npu."),
    ssh_option: list[str] = typer.Option([], "--ssh-option", help="Extra ssh -o KEY=VALUE (repeatable)."),
    timeout: int = typer.Option(10, "--timeout", help="SSH connect timeout in seconds."),
    taskset: str = typer.Option(None, "--taskset", help="Pin timed runs to these cores (taskset -c), e.g. 2,3."),
    cooldown: float = typer.Option(None, "--cooldown", help="Idle seconds before each timed run (preset's default, else 0)."),
    replace: bool = typer.Option(False, "--replace", help="Overwrite a device of the same name."),
) -> None:
    """Record a device (nothing is contacted: `edgekit devices check NAME` probes it)."""

    known = get_preset(preset) if preset else None
    device = Device(
        name,
        ssh,
        identity,
        python or "python3",
        workdir or ".cache/edgekit",
        tuple(ssh_option),
        timeout,
        taskset or (known.taskset if known else None),
        cooldown if cooldown is not None else (known.cooldown_s if known else 0.0),
        preset,
    )
    path = add_device(device, replace)
    typer.echo(f"added device {name} ({ssh}) to {path}")
    if known:
        typer.echo(f"preset {known.name}: {known.description}; install there: {known.packages}")
        typer.echo(f"targets to try: {', '.join(t + '@' + name for t in known.targets)}")
    typer.echo(f"next: edgekit devices check {name}")


@devices_app.command("list")
def list_devices() -> None:
    """The devices in the inventory and what their last check found."""
    from rich.table import Table

    from edgekit.cli.render.table import console

    devices = load_devices()
    if not devices:
        typer.echo(f"no devices in {inventory_path()} (add one: edgekit devices add NAME --ssh USER@HOST)")
        return
    table = Table("name", "ssh", "python", "preset", "arch", "cpu", "runtimes", "checked")
    for d in devices.values():
        runtimes = ", ".join(f"{k} {v}" for k, v in (d.facts.get("runtimes") or {}).items() if v)
        table.add_row(
            d.name, d.ssh, d.python, d.preset or "", d.facts.get("arch", ""), d.facts.get("cpu", ""), runtimes, d.checked or "never"
        )
    console.print(table)
    console.print(f"[dim]{inventory_path()}[/]")


@devices_app.command("remove")
def remove(name: str = typer.Argument(..., help="The device to forget (nothing on it is touched).")) -> None:
    """Remove a device from the inventory."""

    path = remove_device(name)
    typer.echo(f"removed device {name} from {path}")


@devices_app.command("check")
def check(
    name: str = typer.Argument(..., help="The device to probe."),
    json_out: bool = typer.Option(False, "--json", help="Print the facts as JSON."),
) -> None:
    """Probe the device (OS, CPU, ISA, cores, memory, governor, Python, numpy, runtimes, accelerators) and record it."""

    from edgekit.devices.remote import probe_device

    device = get_device(name)
    facts = probe_device(device)
    record_facts(name, facts, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    if json_out:
        typer.echo(json.dumps(facts, indent=2))
        return
    _print_facts(name, facts)
    if device.preset and facts.get("arch") != get_preset(device.preset).arch:
        typer.echo(f"warning: preset {device.preset} expects {get_preset(device.preset).arch}, the device is {facts.get('arch')}")


def _print_facts(name: str, facts: dict) -> None:

    typer.echo(f"device {name}: {facts['os']}, {facts['arch']}")
    typer.echo(
        f"  cpu: {facts['cpu']}, {facts['usable_cores']}/{facts['cores']} cores usable, ISA: {', '.join(facts['isa']) or 'none read'}"
    )
    if facts.get("emulated"):
        typer.echo(f"  emulated: {facts['emulated']} (int8 numerics are that CPU's; latency measured here means nothing)")
    typer.echo(f"  memory: {facts['memory_mb']} MB, governor: {facts['governor'] or 'unknown'}")
    typer.echo(f"  python {facts['python']} ({facts['python_path']}), numpy {facts['numpy']}")
    for runtime, version in facts["runtimes"].items():
        typer.echo(f"  {runtime}: {version or 'not installed'}")
    for kind, found in facts["accelerators"].items():
        typer.echo(f"  {kind}: {', '.join(found) if isinstance(found, list) else found}")
    if not facts["runtimes"].get("onnxruntime") and not facts["runtimes"].get("litert"):
        typer.echo(f"  no onnxruntime or litert there: {install_hint('onnxruntime', facts['arch'])}")
