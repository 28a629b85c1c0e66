"""Real edge devices over SSH: the inventory, the device-side runner, and targets written `RUNTIME:DEVICE@NAME`.

Importing this package imports no framework and starts no connection.
"""

from __future__ import annotations


def device_name(target: str | None) -> str | None:
    """'onnxruntime:cpu@pi5' -> 'pi5'; None for a target on this machine."""
    if not target:
        return None
    base = target.partition("[")[0]
    return base.partition("@")[2].strip() or None if "@" in base else None
