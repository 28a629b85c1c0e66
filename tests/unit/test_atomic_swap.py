"""Multi-file artifacts are swapped as one unit: a kill at every step leaves the old artifact or the new one.

Each version is a real model (ONNX with external data, OpenVINO IR, TFLite) with the sidecar edgekit
writes. A child process writes version 2 over version 1 through `atomic_output` and is killed
(`os._exit`, no cleanup) at the step named by EDGEKIT_FAULT_STEP. The parent then loads the artifact
through edgekit (open_source, describe, make_runner) and checks that the weights and the sidecar
belong to the same version.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgekit.fileio import FAULT_ENV, FAULT_EXIT_CODE, SIDECAR_SUFFIX, atomic_output

FIXED_STEPS = ("staged", "synced", "committed", "cleaned")
WRITE_VERSION = """
import shutil, sys
from pathlib import Path
from edgekit.fileio import atomic_output
final, version = Path(sys.argv[1]), Path(sys.argv[2])
with atomic_output(final) as tmp:
    for f in version.iterdir():
        shutil.copyfile(f, tmp.parent / f.name)
"""


def _sidecar(folder: Path, main: str, version: int) -> None:
    files = sorted(p.name for p in folder.iterdir() if p.name != main) + [main + SIDECAR_SUFFIX]
    (folder / (main + SIDECAR_SUFFIX)).write_text(json.dumps({"precision": "fp32", "version": version, "files": files}))


def _onnx_version(folder: Path, scale: float) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.full((4, 4), scale, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, folder / "model.onnx", save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    return folder / "model.onnx"


def _openvino_version(folder: Path, scale: float) -> Path:
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4], ov.Type.f32, name="x")
    y = ops.matmul(x, ops.constant(np.full((4, 4), scale, np.float32)), False, False)
    ov.save_model(ov.Model([y], [x], "m"), folder / "model.xml", compress_to_fp16=False)
    return folder / "model.xml"


def _tflite_version(folder: Path, scale: float) -> Path:
    import tensorflow as tf

    weight = tf.constant(np.full((4, 4), scale, np.float32))
    fn = tf.function(lambda x: tf.matmul(x, weight), input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    data = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn).convert()
    (folder / "model.tflite").write_bytes(data)
    return folder / "model.tflite"


MAKERS = {"onnx": _onnx_version, "openvino": _openvino_version, "tflite": _tflite_version}


@pytest.fixture(scope="module", params=sorted(MAKERS))
def versions(request, tmp_path_factory):
    """(format, version-1 folder, version-2 folder): the same model with weights 1.0 and 2.0."""
    out = []
    for version, scale in ((1, 1.0), (2, 2.0)):
        folder = tmp_path_factory.mktemp(f"{request.param}-v{version}")
        main = MAKERS[request.param](folder, scale)
        _sidecar(folder, main.name, version)
        out.append(folder)
    return request.param, *out


def _identify(final: Path, fmt: str) -> int:
    """Which version loads at `final`: from its outputs, checked against its sidecar."""
    from edgekit.provenance import describe
    from edgekit.source import open_source
    from edgekit.targets import make_runner

    source = open_source(str(final))
    artifact = describe(final, fmt, None)
    runner = make_runner(source, threads=1)
    runner.load()
    (y,) = runner.infer({artifact.inputs[0].name: np.ones((1, 4), np.float32)})
    by_weights = int(round(float(y.ravel()[0]) / 4.0))
    assert artifact.meta["provenance"]["version"] == by_weights, "the sidecar belongs to the other version"
    return by_weights


def _steps(new: Path) -> list[str]:
    main = next(p.name for p in new.iterdir() if not p.name.endswith((SIDECAR_SUFFIX, ".data", ".bin")))
    moves = sorted((p.name for p in new.iterdir()), key=lambda n: (n == main, n))
    return [*FIXED_STEPS[:3], *(f"moved:{n}" for n in moves), FIXED_STEPS[3]]


def test_a_kill_at_every_step_leaves_the_old_or_the_new_artifact(versions, tmp_path):
    fmt, old, new = versions
    results = {}
    for step in _steps(new):
        folder = tmp_path / step.replace(":", "_")
        shutil.copytree(old, folder)
        final = folder / next(p.name for p in new.iterdir() if p.suffix in (".onnx", ".xml", ".tflite"))
        env = {**__import__("os").environ, FAULT_ENV: step}
        proc = subprocess.run([sys.executable, "-c", WRITE_VERSION, str(final), str(new)], env=env, capture_output=True, text=True)
        assert proc.returncode == FAULT_EXIT_CODE, (step, proc.stderr)
        results[step] = _identify(final, fmt)
        expected_new = step not in ("staged", "synced")
        assert results[step] == (2 if expected_new else 1), (step, results)
        _rewrite_then_only_the_artifact_remains(final, new, fmt)
    assert set(results.values()) == {1, 2}


def _rewrite_then_only_the_artifact_remains(final: Path, new: Path, fmt: str) -> None:
    """The next write sweeps what the killed one left (staging folders, a commit folder)."""
    with atomic_output(final) as tmp:
        for f in new.iterdir():
            shutil.copyfile(f, tmp.parent / f.name)
    assert sorted(p.name for p in final.parent.iterdir()) == sorted(p.name for p in new.iterdir())
    assert _identify(final, fmt) == 2


def test_overwriting_an_external_data_onnx_removes_its_stale_data(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    _onnx_version(old, 1.0)
    _sidecar(old, "model.onnx", 1)
    final = tmp_path / "out" / "model.onnx"
    shutil.copytree(old, final.parent)
    import onnx

    with atomic_output(final) as tmp:
        onnx.save(onnx.load(old / "model.onnx"), tmp)  # the new version keeps its weights inline
    assert sorted(p.name for p in final.parent.iterdir()) == ["model.onnx"]


def test_a_failing_writer_leaves_no_staging_or_work_folder(tmp_path):
    from edgekit.fileio import work_folder

    final = tmp_path / "model.xml"
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(final) as tmp, work_folder(final) as work:
            tmp.write_text("x")
            (work / "scratch").write_text("y")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
