"""PyTorch -> ONNX by routes (edgekit.backends.onnx.from_torch): dynamo, dynamo without the optimizer where the
optimizer failed, then TorchScript, refused where its trace turned a tensor into a Python value (a silently wrong
ONNX otherwise); every route tried is in the provenance with why it failed."""

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import assert_clean_error, run_cli

MODELS = Path(__file__).with_name("export_route_models.py")  # the modules, loaded as FILE:FACTORY


def convert(factory: str, out: Path):
    return run_cli("convert", f"{MODELS}:{factory}", "--to", "onnx", "-i", "x:1x4", "-o", str(out))


def line_of(code: str) -> int:
    return next(i for i, line in enumerate(MODELS.read_text().splitlines(), 1) if line.strip() == code)


def sidecar(out: Path) -> dict:
    return json.loads(out.with_name(out.name + ".edgekit.json").read_text())


def test_a_branch_on_the_input_values_is_refused_at_its_line_with_torch_cond_as_the_fix(tmp_path):
    result = convert("branchy", tmp_path / "b.onnx")
    assert_clean_error(result, f"{MODELS.name}:{line_of('if x.sum() > 0:')}", "`if x.sum() > 0:`", "torch.cond")
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert "dynamo: at " in error and "torchscript: refused: converting a tensor to a Python boolean" in error
    assert "dynamo-unoptimized" not in error  # torch.export failed: the optimizer never ran, no point without it
    assert "\x1b[" not in result.stderr and "step 1/3" not in result.stderr  # the dynamo reason, plain
    assert "GraphModule" not in result.stderr  # torch.export's partial graph, printed on stderr, stays quiet
    assert not list(tmp_path.iterdir())  # no .onnx, no sidecar


def test_the_same_branch_with_torch_cond_converts_and_the_onnx_takes_both_branches(tmp_path):
    import onnxruntime as ort

    out = tmp_path / "c.onnx"
    result = convert("cond_branch", out)
    assert result.code == 0, result.stderr
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for value, expected in ((-3, -4), (3, 6)):
        (got,) = session.run(None, {"x": np.full((1, 4), value, np.float32)})
        np.testing.assert_array_equal(got, np.full((1, 4), expected, np.float32))
    assert sidecar(out)["routes"] == [{"route": "dynamo", "result": "taken", "why": None}]
    assert sidecar(out)["exporter"] == "dynamo" and "fallback_reason" not in sidecar(out)


def test_a_model_that_needs_the_fallback_records_each_route_tried_and_why(tmp_path):
    out = tmp_path / "d.onnx"
    result = convert("distances", out)  # torch.cdist: no dynamo translation, a clean TorchScript trace
    assert result.code == 0, result.stderr
    prov = sidecar(out)
    assert [(r["route"], r["result"]) for r in prov["routes"]] == [("dynamo", "failed"), ("torchscript", "taken")]
    why = prov["routes"][0]["why"]
    assert why.startswith("DispatchError: No ONNX function found") and "aten._cdist_forward" in why
    assert "\x1b" not in why and "step 3/3" not in why and "\n" not in why
    assert prov["routes"][1]["why"] is None
    assert prov["exporter"] == "torchscript" and prov["fallback_reason"] == why
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ONNX export")]
    assert warned == [f"warning: ONNX export: dynamo failed ({why}); trying torchscript"]


def test_an_optimizer_failure_is_retried_without_the_optimizer(tmp_path, monkeypatch):
    import onnxruntime as ort
    import torch

    from edgekit.artifact import TensorSpec
    from edgekit.backends.onnx.from_torch import Export, export_by_routes

    def optimize(self):  # onnxscript's optimizer failing on the graph the exporter wrote
        raise RuntimeError("constant folding failed")

    monkeypatch.setattr(torch.onnx.ONNXProgram, "optimize", optimize)
    model, x = torch.nn.Linear(4, 2).eval(), torch.randn(2, 4)
    out = tmp_path / "m.onnx"
    exporter, routes = export_by_routes(Export(model, (x,), [TensorSpec("x", ("batch", 4))], ["output"], out, False))
    assert routes[-1]["route"] == "dynamo-unoptimized" and exporter == "dynamo"
    assert [(r["route"], r["result"]) for r in routes] == [("dynamo", "failed"), ("dynamo-unoptimized", "taken")]
    assert routes[0]["why"].endswith("RuntimeError: constant folding failed")
    (got,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_trace_that_took_len_of_a_tensor_is_refused_and_nothing_is_left(tmp_path):
    import torch

    from edgekit.artifact import TensorSpec
    from edgekit.backends.onnx.from_torch import EXPORTING, Export, TracedValues, _export_torchscript
    from tests.unit.backends.onnx.export_route_models import TakesLen

    out = tmp_path / "m.onnx"
    job = Export(TakesLen(), (torch.ones(2, 4),), [TensorSpec("x", ("batch", 4))], ["output"], out, False)
    with pytest.raises(TracedValues) as refused:
        _export_torchscript(job)
    assert str(refused.value).startswith("refused: using len to get tensor shape at ")
    assert f"{MODELS.name}:{line_of('return x * len(x)')}" in str(refused.value)
    assert EXPORTING.hint([refused.value]) == "use x.shape[0] instead of len(x), and tensor ops instead of a loop over a tensor"
    assert not out.exists()
