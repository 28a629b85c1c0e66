"""edgekit's device-side runner: copied to a board and run there by `python3 THIS COMMAND`.

Standalone on purpose: the standard library, numpy and the runtime only (no edgekit, torch or
TensorFlow), Python 3.9+. The host keeps all judgement; this script only probes, loads, runs, times
and returns. Its runtime code mirrors edgekit/targets/{onnxruntime,litert,openvino}.py (same session
settings, same LiteRT I/O (de)quantization), which a test checks bit for bit against a local run.

Commands (a request and a reply are frames: one JSON line, then `size` bytes of .npz payload):
  probe [--full]      print the device's facts as one JSON line
  serve ARGS          load once, then answer {"op": "infer"} frames until stdin closes
  bench ARGS          read one frame of feeds, run the latency protocol, reply with the raw times
"""

# Runs on the board's Python, 3.9 and up: no zip(strict=), and the version check stays.
# ruff: noqa: B905, UP036
from __future__ import annotations

import argparse
import glob
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import threading
import time

LAUNCHER = os.getppid()  # the SSH session that started us, read before anything slow

ISA_FLAGS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx_vnni",
    "amx_int8",
    "amx_bf16",
    "asimd",
    "asimddp",
    "i8mm",
    "bf16",
    "sve",
    "sve2",
)
RUNTIMES = {  # runtime -> (module, distributions that provide it)
    "onnxruntime": ("onnxruntime", ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino")),
    "litert": ("ai_edge_litert", ("ai-edge-litert",)),
    "tflite-runtime": ("tflite_runtime", ("tflite-runtime",)),
    "openvino": ("openvino", ("openvino",)),
    "tensorrt": ("tensorrt", ("tensorrt",)),
}
ORT_PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}
DELEGATE_NODES = {  # device files that show an accelerator is there
    "intel-npu": "/dev/accel/accel*",
    "nvidia-jetson-gpu": "/dev/nvhost-gpu",
    "nvidia-gpu": "/dev/nvidia0",
    "coral-edgetpu": "/dev/apex_*",
    "arm-ethos-u": "/dev/ethosu*",
    "gpu-render-node": "/dev/dri/renderD*",
}


class DeviceError(Exception):
    """Reported to the host as {"ok": false, "kind": ..., "message": ...}."""

    def __init__(self, kind: str, message: str, **extra) -> None:
        super().__init__(message)
        self.reply = {"ok": False, "kind": kind, "message": message, **extra}


# ---------------------------------------------------------------- framing


class Channel:
    """Frames on the real stdout; fd 1 itself goes to stderr so native banners cannot corrupt the stream."""

    def __init__(self) -> None:
        self.out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.inp = sys.stdin.buffer

    def send(self, header: dict, payload: bytes = b"") -> None:
        self.out.write(json.dumps(dict(header, size=len(payload))).encode() + b"\n" + payload)
        self.out.flush()

    def receive(self):
        line = self.inp.readline()
        if not line:
            return None, b""
        header = json.loads(line)
        payload = self.inp.read(header.get("size", 0))
        return header, payload


def pack(arrays: dict) -> bytes:
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def unpack(payload: bytes) -> dict:
    import numpy as np

    if not payload:
        return {}
    with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def exit_with_parent() -> None:
    """A lost connection kills our parent, the SSH session: stop then, not after hours of orphaned timing runs.

    An orphan is re-parented to init (pid 1) or a subreaper; the session itself is never pid 1.
    """

    def watch() -> None:
        while True:
            if os.getppid() != LAUNCHER or LAUNCHER == 1:
                os._exit(3)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


# ---------------------------------------------------------------- probing


def read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cpuinfo() -> tuple[str, list]:
    model, flags = None, []
    for line in (read("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "Hardware") and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = value.split()
    return model or platform.processor() or platform.machine(), [f for f in ISA_FLAGS if f in flags]


def memory_mb() -> int | None:
    for line in (read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return None


def os_name() -> str:
    for line in (read("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"') + f" (kernel {platform.release()})"
    return f"{platform.system()} {platform.release()}"


def dist_version(names) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def runtime_versions() -> dict:
    return {runtime: dist_version(dists) for runtime, (_, dists) in RUNTIMES.items()}


def accelerators(full: bool) -> dict:
    """Delegates and devices the runtimes offer (imports them only for the full probe)."""
    found = {name: sorted(glob.glob(pattern)) for name, pattern in DELEGATE_NODES.items() if glob.glob(pattern)}
    if not full:
        return found
    for key, call in (("onnxruntime_providers", ort_providers), ("openvino_devices", openvino_devices)):
        try:
            found[key] = call()
        except Exception:  # a missing or broken runtime: the versions show it
            pass
    return found


def ort_providers() -> list:
    import onnxruntime

    return onnxruntime.get_available_providers()


def openvino_devices() -> list:
    import openvino

    return list(openvino.Core().available_devices)


def probe(full: bool = False) -> dict:
    model, isa = cpuinfo()
    try:
        import numpy

        numpy_version = numpy.__version__
    except ImportError:
        numpy_version = None
    return {
        "os": os_name(),
        "arch": platform.machine(),
        "cpu": model,
        "isa": isa,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_mb": memory_mb(),
        "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "python": platform.python_version(),
        "python_path": sys.executable,
        "numpy": numpy_version,
        "runtimes": runtime_versions(),
        "accelerators": accelerators(full),
        "emulated": os.environ.get("EDGEKIT_EMULATED"),  # set by edgekit.emulation's Pythons: numerics real, latency not
    }


def thermal() -> dict:
    """CPU temperature, frequency and throttling, where /sys (or the Pi's vcgencmd) shows them."""
    temps = {}
    for zone in sorted(glob.glob("/sys/class/thermal/thermal_zone*")):
        value = read(zone + "/temp")
        if value and value.lstrip("-").isdigit():
            temps[read(zone + "/type") or os.path.basename(zone)] = int(value) / 1000
    freqs = [
        int(v) / 1000 for v in (read(p) for p in glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq")) if v and v.isdigit()
    ]
    counts = [
        int(v) for v in (read(p) for p in glob.glob("/sys/devices/system/cpu/cpu*/thermal_throttle/*_throttle_count")) if v and v.isdigit()
    ]
    return {
        "temperature_c": temps or None,
        "freq_mhz": {"min": min(freqs), "max": max(freqs), "mean": round(sum(freqs) / len(freqs), 1)} if freqs else None,
        "throttle_count": sum(counts) if counts else None,
        "pi_throttled": pi_throttled(),
    }


def pi_throttled() -> str | None:
    """Raspberry Pi firmware's throttle bits (0x0 = never throttled), or None off a Pi."""
    if shutil.which("vcgencmd") is None:
        return None
    try:
        out = subprocess.run(["vcgencmd", "get_throttled"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().partition("=")[2] or None


# ---------------------------------------------------------------- runtimes


INTERPRETERS = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter", "tensorflow.lite")  # LiteRT, then older boards


def require(runtime: str):
    """The runtime's module (for litert: the first Interpreter module there is)."""
    import importlib

    module, _ = RUNTIMES[runtime]
    for name in INTERPRETERS if runtime == "litert" else (module,):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise DeviceError("missing", f"{runtime} is not installed", module=module)


class Model:
    """One artifact loaded in one runtime: specs, prepare() (float -> native inputs) and run()."""

    runtime = ""

    def __init__(self, path: str, device: str, threads: int) -> None:
        self.path, self.device, self.threads = path, device, threads

    def specs(self) -> dict:
        return {"inputs": self.inputs, "outputs": self.output_names}

    def prepare(self, feeds: dict):
        return feeds

    def config(self) -> dict:
        return {}


class OrtModel(Model):
    runtime = "onnxruntime"

    def load(self) -> None:
        ort = require("onnxruntime")
        provider = ORT_PROVIDERS.get(self.device)
        if provider is None or provider not in ort.get_available_providers():
            found = ", ".join(ort.get_available_providers())
            raise DeviceError("missing", f"ONNX Runtime has no {provider or self.device} here (found: {found})", module="onnxruntime")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(self.path, options, providers=[provider])
        except Exception as exc:
            raise DeviceError("load", f"ONNX Runtime cannot load it: {first_line(exc)}") from None
        types = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int64)": "int64", "tensor(int32)": "int32"}
        types.update({"tensor(uint8)": "uint8", "tensor(int8)": "int8", "tensor(bool)": "bool", "tensor(double)": "float64"})
        self.inputs = [
            {"name": a.name, "shape": [d if isinstance(d, int) else None for d in a.shape], "dtype": types.get(a.type, a.type)}
            for a in self.session.get_inputs()
        ]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds):
        return self.session.run(self.output_names, feeds)


class LiteRtModel(Model):
    runtime = "litert"

    def load(self) -> None:
        module = require("litert")
        interpreter, self.package = module.Interpreter, module.__name__.split(".")[0]
        try:
            self.interpreter = interpreter(model_path=self.path, num_threads=self.threads)
            self.interpreter.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise DeviceError("load", f"LiteRT cannot load it: {first_line(exc)}") from None
        self._in, self._out = self.interpreter.get_input_details(), self.interpreter.get_output_details()
        self.inputs = [self._spec(d) for d in self._in]
        self.output_names = [tensor_name(d["name"]) for d in self._out]
        self._shapes = {d["index"]: tuple(d["shape"]) for d in self._in}

    def config(self) -> dict:
        return {"interpreter": self.package, "delegate": "XNNPACK (default)"}

    def _spec(self, detail: dict) -> dict:
        import numpy as np

        dims = [None if d < 0 else int(d) for d in detail.get("shape_signature", detail["shape"])]
        dtype = "float32" if quantized(detail) else np.dtype(detail["dtype"]).name
        return {"name": tensor_name(detail["name"]), "shape": dims, "dtype": dtype}

    def prepare(self, feeds: dict) -> dict:
        return {spec["name"]: quantize(feeds[spec["name"]], d) for d, spec in zip(self._in, self.inputs)}

    def run(self, feeds):
        changed = False
        for detail, spec in zip(self._in, self.inputs):
            shape = tuple(feeds[spec["name"]].shape)
            if self._shapes[detail["index"]] != shape:
                self.interpreter.resize_tensor_input(detail["index"], list(shape), strict=True)
                self._shapes[detail["index"]], changed = shape, True
        if changed:
            self.interpreter.allocate_tensors()
        for detail, spec in zip(self._in, self.inputs):
            self.interpreter.set_tensor(detail["index"], feeds[spec["name"]])
        self.interpreter.invoke()
        return [dequantize(self.interpreter.get_tensor(d["index"]), d) for d in self._out]


class OpenVinoModel(Model):
    runtime = "openvino"

    def load(self) -> None:
        ov = require("openvino")
        self.ov, self.core = ov, ov.Core()
        if not any(d.split(".")[0] == self.device.upper() for d in self.core.available_devices):
            found = ", ".join(self.core.available_devices)
            raise DeviceError("missing", f"OpenVINO finds no {self.device.upper()} here (found: {found})", module="openvino")
        try:
            # an ONNX as `edgekit convert --to openvino` converts it (edgekit.backends.openvino.loader.read_model)
            self.model = self.core.read_model(self.path) if self.path.endswith(".xml") else self.ov.convert_model(self.path)
        except Exception as exc:
            raise DeviceError("load", f"OpenVINO cannot read it: {first_line(exc)}") from None
        self.inputs = [
            {
                "name": p.get_any_name(),
                "shape": [d.get_length() if d.is_static else None for d in p.get_partial_shape()],
                "dtype": p.get_element_type().to_dtype().name,
            }
            for p in self.model.inputs
        ]
        self.output_names = [p.get_any_name() for p in self.model.outputs]
        self._compiled = {}

    def config(self) -> dict:
        config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1"}
        if self.device.upper() == "CPU":
            config.update({"INFERENCE_NUM_THREADS": str(self.threads), "INFERENCE_PRECISION_HINT": "f32"})
        return config

    def run(self, feeds):
        key = tuple((name, tuple(feeds[name].shape)) for name in sorted(feeds))
        if key not in self._compiled:
            model = self.model.clone()
            model.reshape({name: list(shape) for name, shape in key})
            compiled = self.core.compile_model(model, self.device.upper(), self.config())
            self._compiled[key] = (compiled, compiled.create_infer_request())
        compiled, request = self._compiled[key]
        request.infer({port: feeds[port.get_any_name()] for port in compiled.inputs})
        return [request.get_output_tensor(i).data.copy() for i in range(len(compiled.outputs))]


MODELS = {"onnxruntime": OrtModel, "litert": LiteRtModel, "openvino": OpenVinoModel}


def tensor_name(raw: str) -> str:
    return raw[len("serving_default_") :].split(":")[0] if raw.startswith("serving_default_") else raw.split(":")[0]


def quantized(detail: dict) -> bool:
    import numpy as np

    return np.dtype(detail["dtype"]).kind in "iu" and detail["quantization"][0] != 0


def quantize(array, detail: dict):
    import numpy as np

    if not quantized(detail):
        return array
    scale, zero_point = detail["quantization"]
    info = np.iinfo(detail["dtype"])
    return np.clip(np.round(array / scale + zero_point), info.min, info.max).astype(detail["dtype"])


def dequantize(array, detail: dict):
    import numpy as np

    if not quantized(detail):
        return array
    scale, zero_point = detail["quantization"]
    return (array.astype(np.float32) - zero_point) * scale


def first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def load_model(args) -> tuple:
    """The loaded model and its load time in ms."""
    if args.runtime not in MODELS:
        raise DeviceError("unsupported", f"the device runner does not run {args.runtime} targets yet")
    threads = args.threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    model = MODELS[args.runtime](args.artifact, args.device, threads)
    start = time.perf_counter()
    model.load()
    return model, (time.perf_counter() - start) * 1000


def hello(model, load_ms: float) -> dict:
    version = dist_version(RUNTIMES["litert" if model.runtime == "litert" else model.runtime][1])
    return {"ok": True, "load_ms": load_ms, "threads": model.threads, "version": version, "config": model.config(), **model.specs()}


# ---------------------------------------------------------------- commands


def serve(channel: Channel, args) -> None:
    model, load_ms = load_model(args)
    channel.send(dict(hello(model, load_ms), facts=probe()))
    while True:
        header, payload = channel.receive()
        if header is None:
            return
        feeds = unpack(payload)
        outputs = model.run(model.prepare(feeds))
        channel.send({"ok": True}, pack({f"out{i}": o for i, o in enumerate(outputs)}))


def random_feeds(model, batch: int) -> dict:
    import numpy as np

    rng, feeds = np.random.default_rng(0), {}
    for spec in model.inputs:
        shape = (batch, *[d or 1 for d in spec["shape"][1:]])
        kind = np.dtype(spec["dtype"]).kind
        feeds[spec["name"]] = rng.random(shape, dtype=np.float32).astype(spec["dtype"]) if kind == "f" else np.zeros(shape, spec["dtype"])
    return feeds


def bench(channel: Channel, args) -> None:
    """The host's protocol: load, first inference (preparation included), warm-up, timed runs of prepared inputs."""
    header, payload = channel.receive()
    time.sleep(args.cooldown)
    before = thermal()
    model, load_ms = load_model(args)
    feeds = unpack(payload) or random_feeds(model, args.batch)
    start = time.perf_counter_ns()
    prepared = model.prepare(feeds)
    model.run(prepared)
    first_ms = (time.perf_counter_ns() - start) / 1e6
    for _ in range(args.warmup):
        model.run(prepared)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter_ns()
        model.run(prepared)
        times.append((time.perf_counter_ns() - start) / 1e6)
    reply = dict(hello(model, load_ms), first_inference_ms=first_ms, times_ms=times, thermal={"before": before, "after": thermal()})
    reply.update(peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, facts=probe())
    channel.send(reply)


def arguments(argv):
    parser = argparse.ArgumentParser(prog="edgekit_device_runner")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("probe").add_argument("--full", action="store_true")
    for name in ("serve", "bench"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--artifact", required=True)
        cmd.add_argument("--runtime", required=True)
        cmd.add_argument("--device", default="cpu")
        cmd.add_argument("--threads", type=int, default=0)
        cmd.add_argument("--batch", type=int, default=1)
        cmd.add_argument("--warmup", type=int, default=10)
        cmd.add_argument("--runs", type=int, default=100)
        cmd.add_argument("--cooldown", type=float, default=0.0)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = arguments(argv)
    channel = Channel()
    exit_with_parent()
    try:
        if sys.version_info < (3, 9):
            raise DeviceError("python", f"Python {platform.python_version()} is too old (3.9+ needed)")
        try:
            import numpy  # noqa: F401
        except ImportError:
            raise DeviceError("missing", "numpy is not installed", module="numpy") from None
        if args.command == "probe":
            channel.send(dict(probe(args.full), ok=True))
        else:
            (serve if args.command == "serve" else bench)(channel, args)
    except DeviceError as exc:
        channel.send(dict(exc.reply, arch=platform.machine(), python=platform.python_version()))
        return 3
    except OSError as exc:
        kind = "disk-full" if getattr(exc, "errno", None) == 28 else "error"
        channel.send({"ok": False, "kind": kind, "message": first_line(exc)})
        return 3
    except Exception as exc:  # the runtime's own failures: one line to the host, the traceback to stderr
        import traceback

        traceback.print_exc()
        message = f"{type(exc).__name__}: {first_line(exc)}"
        channel.send({"ok": False, "kind": "error", "message": message, "arch": platform.machine(), "python": platform.python_version()})
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
