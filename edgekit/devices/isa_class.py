"""The ISA class of `--for-target`: a class name, a device preset, a device of the inventory or this host."""

from __future__ import annotations

from edgekit.devices.inventory import get_device, load_devices
from edgekit.devices.presets import PRESETS
from edgekit.errors import EdgekitError
from edgekit.isa import CLASSES, IsaClass, classify, host_class


def class_for(for_target: str | None) -> tuple[IsaClass, str]:
    """(class, where it came from) for `--for-target`: a class name, a device preset, a device of the
    inventory (NAME or runtime:device@NAME), or a target on this host."""
    spec = (for_target or "").strip()
    device = spec.rpartition("@")[2]
    if spec in CLASSES:
        return CLASSES[spec], f"--for-target {spec}"
    if spec in PRESETS:
        return CLASSES[PRESETS[spec].isa_class], f"device preset {spec}"
    if "@" in spec or (spec and ":" not in spec and _is_device(spec)):
        return _device_class(device)
    if spec and ":" not in spec:
        raise EdgekitError(
            f"--for-target {spec} is not a target, an ISA class or a device",
            hint=f"use a target (onnxruntime:cpu), a class ({', '.join(CLASSES)}), a preset ({', '.join(PRESETS)}) or a device of `edgekit devices list`",
        )
    return host_class(), "this host's CPU flags"


def _is_device(name: str) -> bool:
    return name in load_devices()


def _device_class(name: str) -> tuple[IsaClass, str]:
    """An inventory device's class: from what `devices check` probed, else from its preset."""
    device = get_device(name)
    if device.facts.get("arch"):
        return classify(set(device.facts.get("isa") or ()), device.facts["arch"]), f"device {name} (probed {device.checked})"
    if device.preset in PRESETS:
        return CLASSES[PRESETS[device.preset].isa_class], f"device {name} (preset {device.preset}, not probed yet)"
    raise EdgekitError(f"device {name} has not been probed: its CPU class is unknown", hint=f"run `edgekit devices check {name}` first")
