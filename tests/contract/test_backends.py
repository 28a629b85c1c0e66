"""The backend contract: every registered backend passes the same checks, or the suite fails.

For each backend: convert the trained FashionCNN from each source family it declares (fp32), load the
result, run it, validate it against the reference on real Fashion-MNIST images (fidelity and accuracy),
time it with the latency protocol, and refuse a corrupt file of its suffix with one clear error line.
A source-only backend (torch, keras) is validated and timed as it is. A backend that cannot run here
(TensorRT: no GPU) skips with the reason; a backend registered without an entry below fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from edgekit.registry import backends
from tests.conftest import assert_clean_error, run_cli

REFERENCES = {"torch": "zoo:fashion-cnn", "keras": "zoo:fashion-cnn-keras"}  # the trained models every edge starts from
ORIGIN = {"torch": "torch", "keras": "keras", "onnx": "torch", "openvino": "torch", "tflite": "torch"}  # a converted source's origin
DATA = "zoo:fashion-mnist-test"


@dataclass(frozen=True)
class Contract:
    """What a backend's checks need beyond what its registry entry declares."""

    min_cosine: float = 0.999  # fp32 conversions of the same weights
    max_drop: float = 0.5  # accuracy points on the validation samples


CONTRACTS = {
    "torch": Contract(),
    "keras": Contract(),
    "onnx": Contract(),
    "openvino": Contract(min_cosine=0.998),  # OpenVINO IR compresses weights to fp16 when written
    "tflite": Contract(),
    "tensorrt": Contract(),
    "executorch": Contract(),
}


def edges() -> list[tuple[str, str]]:
    """(backend format, source family) for every converter a backend declares; (format, format) for a source-only one."""
    return [(b.format, source) for b in backends().values() for source in (b.converters or {b.format: None})]


def test_every_backend_has_a_contract():
    assert set(CONTRACTS) == set(backends()), "add the backend to CONTRACTS (and make it pass the checks below)"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """format -> source family -> the artifact written (module-cached: a self-edge reads the torch edge's output)."""
    cache: dict[tuple[str, str], Path] = {}
    folder = tmp_path_factory.mktemp("contract")

    def convert(fmt: str, source_family: str) -> Path:
        if (fmt, source_family) not in cache:
            from edgekit.conversion import ConvertOptions
            from edgekit.converters.pipeline import convert as run_convert
            from edgekit.registry import backend
            from edgekit.source import open_source

            spec = REFERENCES[source_family] if source_family in REFERENCES else str(convert(source_family, "torch"))
            out = folder / f"{source_family}-to-{fmt}{backend(fmt).suffix}"
            cache[fmt, source_family] = run_convert(open_source(spec), fmt, out, ConvertOptions("fp32")).path
        return cache[fmt, source_family]

    return convert


def _skip_unless_runs(fmt: str) -> None:
    from edgekit.targets import DEFAULT_TARGET, parse_target, runner_class

    runtime = parse_target(DEFAULT_TARGET[fmt])[0]
    cls = runner_class(runtime)
    if not cls.installed():
        pytest.skip(f"{runtime} is not installed here (pip install {cls.package}); {DEFAULT_TARGET[fmt]} cannot run")


@pytest.mark.parametrize(("fmt", "source"), edges(), ids=lambda v: str(v))
def test_convert_load_run_validate_bench(fmt, source, converted):
    from edgekit.calibration import random_samples
    from edgekit.provenance import DESCRIBERS, describe
    from edgekit.source import open_source
    from edgekit.targets import make_runner
    from edgekit.validation.benchmark import BenchSettings
    from edgekit.validation.validate import ValidationRequest, validate
    from edgekit.zoo.names import zoo_data

    _skip_unless_runs(fmt)
    contract = CONTRACTS[fmt]
    spec = REFERENCES[fmt] if fmt in REFERENCES else str(converted(fmt, source))
    model = open_source(spec)
    assert model.family == fmt
    if fmt in DESCRIBERS:  # load: the file describes itself
        artifact = describe(model.path, fmt, None)
        assert artifact.inputs and artifact.outputs and artifact.size_bytes() > 0
    runner = make_runner(model, threads=1)  # run: one batch through its default target (real images come in validate)
    runner.load()
    (scores,) = runner.infer(next(random_samples(runner.inputs, 1).batches(1)))
    assert scores.shape[-1] == 10 and runner.load_seconds > 0

    origin = ORIGIN.get(source, fmt)
    data = DATA if origin == "torch" else str(zoo_data(DATA, layout="nhwc"))  # the Keras model takes NHWC images
    report = validate(
        ValidationRequest(
            model, open_source(REFERENCES[origin]), data=data, data_limit=200, latency=BenchSettings(threads=1, warmup=1, runs=3)
        )
    )
    row_cosine = min(f["cosine_mean"] for f in report["fidelity"])
    assert row_cosine >= contract.min_cosine, report["fidelity"]
    assert report["accuracy"]["drop_points"] <= contract.max_drop, report["accuracy"]
    assert report["accuracy"]["artifact"] > 80, report["accuracy"]  # a trained Fashion-MNIST classifier, not noise
    assert report["latency"]["latency"]["p50"] > 0 and report["latency"]["load_ms"] > 0  # timed in a fresh process
    assert report["gate"]["passed"], report["gate"]


@pytest.mark.parametrize("fmt", sorted(CONTRACTS))
def test_refuses_a_corrupt_file(fmt, tmp_path):
    _skip_unless_runs(fmt)  # the runtime is what reads (and refuses) the file: without it there is nothing to check
    bad = tmp_path / f"broken{backends()[fmt].suffix}"
    bad.write_bytes(b"\x00garbage, not a model\xff" * 40)
    assert_clean_error(run_cli("info", str(bad)))
