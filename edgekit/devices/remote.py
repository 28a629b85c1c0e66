"""Running an artifact on a device: a Runner whose load/infer go over SSH, and the latency protocol there.

The device runs edgekit/devices/device_runner.py (stdlib + numpy + the runtime). The host copies it
and the artifact into a content-addressed cache there, sends input samples, gets outputs and raw
times back, and keeps every judgement: comparison, percentiles (LatencyStats), gates.
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import subprocess
import weakref
from pathlib import Path

import numpy as np

from edgekit.artifact import TensorSpec, check_array
from edgekit.devices import ssh
from edgekit.devices.inventory import Device, get_device
from edgekit.devices.presets import install_hint
from edgekit.errors import EdgekitError, InputMismatchError, ModelLoadError, RuntimeMissingError
from edgekit.fileio import sha256_of_file
from edgekit.metrics.latency import BenchResult, LatencyStats
from edgekit.source import ModelSource
from edgekit.targets.base import Runner

RUNNER_SCRIPT = Path(__file__).with_name("device_runner.py")
DEVICE_RUNTIMES = ("onnxruntime", "litert", "openvino")  # what device_runner.py can run


def content_key(kind: str, files: dict[str, Path]) -> str:
    """`kind/SHA`: the same files give the same folder on the device, so a re-run copies nothing."""
    digest = hashlib.sha256()
    for name, path in sorted(files.items()):
        digest.update(name.encode() + b"\0" + bytes.fromhex(sha256_of_file(path)))
    return f"{kind}/{digest.hexdigest()[:32]}"


def artifact_files(source: ModelSource) -> dict[str, Path]:
    """The artifact's file and its side files (ONNX external data, OpenVINO .bin), by name relative to it."""
    if source.path is None or not source.path.is_file():
        raise ModelLoadError(f"{source.spec} is not a model file that can be copied to a device", hint="convert it first")
    files = {source.path.name: source.path}
    from edgekit.provenance import DESCRIBERS, describe

    if source.format in DESCRIBERS:
        for side in describe(source.path, source.format, None).meta.get("side_files", []):
            side = Path(side)
            if side.exists():
                files[str(side.relative_to(source.path.parent))] = side
    return files


def upload_artifact(device: Device, source: ModelSource) -> tuple[str, str]:
    """Copy the runner and the artifact where the device's cache lacks them; their paths there."""
    runner = ssh.Upload(content_key("runner", {RUNNER_SCRIPT.name: RUNNER_SCRIPT}), {RUNNER_SCRIPT.name: RUNNER_SCRIPT})
    files = artifact_files(source)
    artifact = ssh.Upload(content_key("artifacts", files), files)
    ssh.sync(device, [runner, artifact])
    return f"{runner.key}/{RUNNER_SCRIPT.name}", f"{artifact.key}/{source.path.name}"


def runner_command(device: Device, script: str, args: list[str], pin: bool = False) -> str:
    """cd into the cache and exec the runner (pinned with taskset when the device asks for it)."""
    prefix = f"taskset -c {shlex.quote(device.taskset)} " if pin and device.taskset else ""
    quoted = " ".join(shlex.quote(a) for a in [script, *args])
    return f"cd {shlex.quote(ssh.remote_workdir(device))} && exec {prefix}{shlex.quote(device.python)} {quoted}"


def probe_device(device: Device, full: bool = True) -> dict:
    """The device's facts (OS, arch, CPU, ISA, cores, memory, governor, Python, numpy, runtimes, accelerators)."""
    runner = ssh.Upload(content_key("runner", {RUNNER_SCRIPT.name: RUNNER_SCRIPT}), {RUNNER_SCRIPT.name: RUNNER_SCRIPT})
    ssh.sync(device, [runner])
    command = runner_command(device, f"{runner.key}/{RUNNER_SCRIPT.name}", ["probe", *(["--full"] if full else [])])
    header, _ = ssh.decode_reply(device, ssh.run(device, command, timeout=device.timeout_s + 60, during="while probing"))
    raise_for_reply(device, header, None)
    header.pop("ok", None)
    header.pop("size", None)
    return header


def raise_for_reply(device: Device, header: dict, target: str | None) -> None:
    """The runner's failure as the host's error: a missing package named for the device's architecture, a load error."""
    if header.get("ok"):
        return
    kind, message = header.get("kind"), header.get("message", "failed")
    where = f"device '{device.name}' ({header.get('arch', '?')}, Python {header.get('python', '?')})"
    if kind == "missing":
        runtime_device = (target or "").partition("@")[0].partition(":")[2] or "cpu"
        hint = install_hint(header.get("module", ""), header.get("arch"), runtime_device)
        raise RuntimeMissingError(f"{message} on {where}", hint=f"{hint} in {device.python} there")
    if kind == "load":
        raise ModelLoadError(
            f"{where} cannot load the artifact: {message}",
            hint="convert for the runtime version installed there (see `edgekit devices check`)",
        )
    if kind == "disk-full":
        raise ssh.disk_full(device, message)
    raise EdgekitError(f"{where} failed: {message}", hint="run `edgekit devices check` for the device's state")


def split_target(target: str) -> tuple[str, str]:
    """'onnxruntime:cpu@pi5[...]' -> ('onnxruntime:cpu[...]', 'pi5')."""
    base, bracket, rest = target.partition("[")
    local, _, name = base.partition("@")
    return local + bracket + rest, name.strip()


def _device_args(runtime: str, device: str, artifact: str, threads: int | None) -> list[str]:
    if runtime not in DEVICE_RUNTIMES:
        raise EdgekitError(f"{runtime} targets cannot run on a device yet", hint=f"on a device use: {', '.join(DEVICE_RUNTIMES)}")
    return ["--artifact", artifact, "--runtime", runtime, "--device", device, "--threads", str(threads or 0)]


class RemoteRunner(Runner):
    """A runner on a device: load() starts the runner there over one SSH session, infer() sends a batch over it."""

    def __init__(self, local_cls, name: str, source, device="cpu", threads=None, inputs=None, options=None) -> None:
        self.runtime, self.package, self.import_name = local_cls.runtime, local_cls.package, local_cls.import_name
        self.families, self.options = local_cls.families, {}
        self.board = get_device(name)
        if options:
            raise EdgekitError(f"target options ({', '.join(options)}) are not supported on a device yet", hint="drop the [...] part")
        super().__init__(source, device, threads, inputs, {})
        self.requested_threads = threads
        self.facts: dict = {}
        self._proc = None
        self._config: dict = {}
        self._version = "not installed"

    @property
    def target(self) -> str:
        return f"{self.runtime}:{self.device}@{self.board.name}"

    def require(self) -> None:
        """Nothing to check here: the device says what it lacks when the runner starts there."""

    def _check_device(self) -> None:
        """The board checks its own runtime and device (a missing provider there is one clear error)."""

    def version(self) -> str:
        return self._version

    def config(self) -> dict:
        return self._config

    def _load_impl(self) -> None:
        script, artifact = upload_artifact(self.board, self.source)
        args = ["serve", *_device_args(self.runtime, self.device, artifact, self.requested_threads)]
        command = ssh.ssh_args(self.board, runner_command(self.board, script, args))
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._finalizer = weakref.finalize(self, _close, self._proc)
        header, _ = self._receive("while loading the artifact")
        raise_for_reply(self.board, header, self.target)
        self.threads, self._version, self._config = header["threads"], header.get("version") or "unknown", header.get("config", {})
        self.facts = header.get("facts", {})
        self.inputs = [TensorSpec(s["name"], tuple(s["shape"]), s["dtype"]) for s in header["inputs"]]
        self.output_names = list(header["outputs"])

    def _infer_impl(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        payload = pack(feeds)
        try:
            self._proc.stdin.write(json.dumps({"op": "infer", "size": len(payload)}).encode() + b"\n" + payload)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the reply (or its absence) says what happened
        header, body = self._receive("during the run")
        if not header.get("ok"):
            raise_for_reply(self.board, header, self.target)
        arrays = unpack(body)
        return [arrays[f"out{i}"] for i in range(len(arrays))]

    def _receive(self, during: str) -> tuple[dict, bytes]:
        line = self._proc.stdout.readline()
        if not line:
            self._proc.stdin.close()
            code = self._proc.wait()
            stderr = self._proc.stderr.read().decode(errors="replace")
            ssh.check_ssh_exit(self.board, code, stderr, during)
            last = (stderr.strip().splitlines() or [f"exit status {code}"])[-1]
            raise EdgekitError(
                f"the runner on device '{self.board.name}' stopped {during}: {last}",
                hint="run `edgekit devices check` for the device's state",
            )
        header = ssh.parse_header(self.board, line)
        return header, self._proc.stdout.read(header.get("size", 0))

    def close(self) -> None:
        """End the session on the device."""
        if self._proc is not None:
            self._finalizer()


def _close(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def unpack(payload: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def make_remote_runner(source: ModelSource, target: str, threads: int | None, inputs: list[TensorSpec] | None):
    """The RemoteRunner for `runtime:device@NAME` (the local runner class gives the families it runs)."""
    from edgekit.targets import parse_target, runner_class

    local, name = split_target(target)
    runtime, device, options = parse_target(local)
    cls = runner_class(runtime)
    if source.family not in cls.families:
        raise EdgekitError(f"{runtime} cannot run a {source.format} model", hint=f"{runtime} runs {', '.join(cls.families)} models")
    return RemoteRunner(cls, name, source, device, threads, inputs, options)


def bench_on_device(source: ModelSource, settings, inputs: list[TensorSpec] | None = None, feeds: dict[str, np.ndarray] | None = None):
    """The latency protocol run on the device in a fresh process there; percentiles computed here from its raw times."""
    from edgekit.provenance import model_size

    runner = make_remote_runner(source, settings.target, settings.threads, inputs)
    board = runner.board
    script, artifact = upload_artifact(board, source)
    args = ["bench", *_device_args(runner.runtime, runner.device, artifact, settings.threads)]
    args += [
        "--batch",
        str(settings.batch),
        "--warmup",
        str(settings.warmup),
        "--runs",
        str(settings.runs),
        "--cooldown",
        str(board.cooldown_s),
    ]
    for spec in inputs if feeds is not None and inputs else []:
        if spec.name in feeds:
            check_array(spec, feeds[spec.name])
    payload = pack(feeds) if feeds else b""
    request = json.dumps({"op": "bench", "size": len(payload)}).encode() + b"\n" + payload
    stdout = ssh.run(board, runner_command(board, script, args, pin=True), request, timeout=None, during="during the timed runs")
    header, _ = ssh.decode_reply(board, stdout)
    raise_for_reply(board, header, runner.target)
    times = np.asarray(header["times_ms"], dtype=float)
    if len(times) == 0:
        raise InputMismatchError("no timed runs", hint="pass --runs 1 or more")
    return BenchResult(
        source.spec,
        runner.target,
        header.get("version") or "unknown",
        header["threads"],
        header["load_ms"],
        header["first_inference_ms"],
        LatencyStats.from_times(times, settings.batch),
        header["peak_rss_mb"],
        model_size(source),
        [round(t, 4) for t in times],
        None,
        header.get("config"),
        None,
        device=device_section(board, header),
    )


def device_section(board: Device, header: dict) -> dict:
    """What a report says about the device: its name, how it was reached, its facts, and its thermal state."""
    section = {"name": board.name, "ssh": board.ssh, "facts": header.get("facts") or board.facts, "checked": board.checked}
    if "thermal" in header:
        section.update(thermal=header["thermal"], taskset=board.taskset, cooldown_s=board.cooldown_s)
    return section
