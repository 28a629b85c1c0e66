"""Routes, not dead ends: OpenVINO and TFLite from PyTorch try their own converter first, then go through ONNX where an
op fails; the provenance lists every route tried and why it failed, and the artifact is verified against its source.

The models are real (route_models): B-CNN's signed square root written with torch.signbit, which OpenVINO's PyTorch
frontend and litert-torch lack but torch.onnx exports, and a median pooling that no route converts."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import assert_clean_error, run_cli

torch = pytest.importorskip("torch")

BILINEAR = "tests.unit.backends.route_models:bilinear_net"
MEDIAN = "tests.unit.backends.route_models:median_pool_net"
SIGNBIT_OV = "No conversion rule found for operations: aten::signbit"
SIGNBIT_LINE = "signed = torch.where(torch.signbit(gram), -root, root)"
ONNX2TF_MISSING = "onnx2tf is not installed (pip install --no-deps onnx2tf)"


def _at_signbit(error: str) -> str:
    """The one-line reason of an error raised on BilinearNet's signbit line, with the user's file and line."""
    from tests.unit.backends import route_models

    path = route_models.__file__
    line = next(i for i, text in enumerate(open(path).read().splitlines(), 1) if SIGNBIT_LINE in text)
    return f"at {path}:{line} (`{SIGNBIT_LINE}`): {error}"


def _converted(spec: str, to: str, out) -> dict:
    """Convert in-process; the sidecar provenance."""
    import edgekit
    from edgekit.fileio import SIDECAR_SUFFIX

    edgekit.convert(spec, to=to, output=str(out))
    return json.loads(out.with_name(out.name + SIDECAR_SUFFIX).read_text())


def _onnx2tf_importable() -> bool:
    """onnx2tf and the modules it imports are installed (found, not imported: that would import TensorFlow here)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnx2tf", "tf_keras", "onnx_graphsurgeon", "sng4onnx"))


def _assert_through_onnx(provenance: dict, failed: list[tuple[str, str]]) -> None:
    """The routes `failed` (route, one-line reason), then via-onnx taken with the ONNX exporter's own route; verified."""
    routes = provenance["routes"]
    assert [(r["route"], r["result"], r["why"]) for r in routes] == [(name, "failed", why) for name, why in failed] + [
        ("via-onnx", "taken", None)
    ]
    assert routes[-1]["exporter"] == "dynamo" and routes[-1]["onnx_routes"] == [{"route": "dynamo", "result": "taken", "why": None}]
    assert "\x1b" not in json.dumps(routes)
    assert provenance["verified"]["result"] == "match", provenance["verified"]


def test_openvino_goes_through_onnx_for_an_op_its_pytorch_frontend_lacks(tmp_path):
    pytest.importorskip("openvino")
    out = tmp_path / "bilinear.xml"
    provenance = _converted(BILINEAR, "openvino", out)
    _assert_through_onnx(
        provenance, [("openvino", SIGNBIT_OV), ("openvino-export", "No conversion rule found for operations: aten.signbit.default")]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bilinear.bin", "bilinear.xml", "bilinear.xml.edgekit.json"]  # no ONNX left


@pytest.mark.skipif(not _onnx2tf_importable(), reason="the route through ONNX needs onnx2tf: pip install --no-deps onnx2tf ...")
def test_tflite_goes_through_onnx_for_an_op_litert_torch_lacks(tmp_path):
    pytest.importorskip("litert_torch")
    out = tmp_path / "bilinear.tflite"
    provenance = _converted(BILINEAR, "tflite", out)
    _assert_through_onnx(provenance, [("litert-torch", _at_signbit("RuntimeError: Lowering not found: aten.signbit.default"))])
    assert provenance["routes"][-1]["converter"].startswith("onnx2tf ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bilinear.tflite", "bilinear.tflite.edgekit.json"]


@pytest.mark.skipif(_onnx2tf_importable(), reason="onnx2tf is installed: the route through ONNX runs")
def test_tflite_without_onnx2tf_names_both_routes_and_what_to_install(tmp_path):
    pytest.importorskip("litert_torch")
    out = tmp_path / "bilinear.tflite"
    result = run_cli("convert", BILINEAR, "--to", "tflite", "-o", out)
    litert = _at_signbit("RuntimeError: Lowering not found: aten.signbit.default")
    assert_clean_error(result, f"litert-torch: {litert}; via-onnx: {ONNX2TF_MISSING}", "no lowering for aten.signbit.default")
    assert "pip install --no-deps onnx2tf onnx-graphsurgeon sng4onnx tf-keras" in result.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_openvino_with_every_route_failing_names_each_route_and_writes_nothing(tmp_path):
    pytest.importorskip("openvino")
    out = tmp_path / "median" / "median.xml"
    result = run_cli("convert", MEDIAN, "--to", "openvino", "-o", out)
    assert_clean_error(
        result,
        "OpenVINO cannot convert the model by any route: openvino: No conversion rule found for operations: aten::median; "
        "openvino-export: No conversion rule found for operations: aten.median.dim; via-onnx: ONNX export failed: dynamo:",
        "torchscript: UnsupportedOperatorError: Exporting the operator 'aten::median' to ONNX opset version 17 is not supported",
        "OpenVINO has no conversion for aten::median",  # the hint: the causes the errors showed, each once
        "aten.median has no ONNX translation",
    )
    assert "\x1b" not in result.stderr
    assert not out.exists() and not list(out.parent.iterdir())


def test_tflite_with_every_route_failing_names_each_route_and_writes_nothing(tmp_path):
    pytest.importorskip("litert_torch")
    out = tmp_path / "median" / "median.tflite"
    result = run_cli("convert", MEDIAN, "--to", "tflite", "-o", out)
    via_onnx = "via-onnx: ONNX export failed: dynamo:" if _onnx2tf_importable() else f"via-onnx: {ONNX2TF_MISSING}"
    assert_clean_error(
        result,
        "TFLite conversion failed by every route: litert-torch: at ",  # the user's file and line, then the cause
        "route_models.py:",
        "RuntimeError: Lowering not found: aten.median.dim; " + via_onnx,
        "litert-torch has no lowering for aten.median.dim",
    )
    assert "\x1b" not in result.stderr
    assert not out.exists() and not list(out.parent.iterdir())
