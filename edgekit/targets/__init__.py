"""Targets: a runtime on a device, written `runtime:device[options]@BOARD`. Runners are named by the registry's
"module:Class" strings and imported only when used."""

from __future__ import annotations

from edgekit import registry
from edgekit.artifact import TensorSpec
from edgekit.errors import EdgekitError
from edgekit.imports import import_attr
from edgekit.source import ModelSource

# Runners ("module:Class", importing one imports no framework) and default targets, from the backend registry.
RUNNERS = registry.runners()
# The runner of a target on a board over SSH (`runtime:device@NAME`): the devices layer, above this one, named as the
# runners are, so that this layer imports nothing above it.
REMOTE_RUNNER = "edgekit.devices.remote:make_remote_runner"
DEFAULT_TARGET = {fmt: targets[0] for fmt, targets in registry.default_targets().items()}


def runner_class(runtime: str):
    """The Runner class registered for `runtime`."""
    if runtime not in RUNNERS:
        raise EdgekitError(f"unknown runtime '{runtime}'", hint=f"known: {', '.join(RUNNERS)} (see `edgekit targets`)")
    return import_attr(RUNNERS[runtime], "runner")


def parse_target(target: str) -> tuple[str, str, dict[str, str]]:
    """'torch:cuda[compile=reduce-overhead,dtype=fp16]' -> ('torch', 'cuda', {'compile': ..., 'dtype': ...}).

    A bare runtime means its CPU; the bracket holds the runner's options (see `edgekit targets`).
    """
    base, bracket, rest = target.partition("[")
    if bracket and not rest.endswith("]"):
        raise EdgekitError(f"target '{target}' has an unclosed '['", hint="write options as runtime:device[key=value,...]")
    options = {}
    for item in filter(None, (part.strip() for part in rest[:-1].split(","))):
        key, equals, value = item.partition("=")
        if not equals or not key.strip() or not value.strip():
            raise EdgekitError(
                f"target option '{item}' in '{target}' is not key=value", hint="e.g. torch:cuda[compile=reduce-overhead,dtype=fp16]"
            )
        options[key.strip()] = value.strip()
    runtime, _, device = base.strip().partition(":")
    return runtime, device or "cpu", options


def make_runner(source: ModelSource, target: str | None = None, threads: int | None = None, inputs: list[TensorSpec] | None = None):
    """A Runner for `source` on `target` (default: the source's own runtime on the CPU)."""
    target = target or DEFAULT_TARGET.get(source.family)
    if target is None:
        raise EdgekitError(f"no default target for {source.format} models", hint="pass --target (see `edgekit targets`)")
    if device_name(target):  # runtime:device@NAME runs on a board over SSH
        return import_attr(REMOTE_RUNNER)(source, target, threads, inputs)
    runtime, device, runner_options = parse_target(target)
    cls = runner_class(runtime)
    if source.family not in cls.families:
        raise EdgekitError(
            f"{runtime} cannot run a {source.format} model",
            hint=f"{runtime} runs {', '.join(cls.families)} models; convert first with `edgekit convert`",
        )
    return cls(source, device, threads, inputs, runner_options)


def device_name(target: str | None) -> str | None:
    """'onnxruntime:cpu@pi5' -> 'pi5'; None for a target on this machine."""
    if not target:
        return None
    base = target.partition("[")[0]
    return base.partition("@")[2].strip() or None if "@" in base else None
