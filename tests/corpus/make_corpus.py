"""The bad-input corpus: files a hostile or careless user hands edgekit, made by this script (no committed binaries).

`write_corpus(folder)` writes every file into `folder`; `CASES` says which command runs on which file
and what the one `error:` line must name. tests/corpus/test_corpus.py runs every case through the real
CLI; `python tests/corpus/make_corpus.py --table` prints docs/robustness.md's table from that run.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RANDOM = np.random.default_rng(22)


@dataclass(frozen=True)
class Case:
    """One bad input run through one command; `{d}` in args is the corpus folder."""

    name: str
    args: tuple[str, ...]
    needles: tuple[str, ...] = ()  # what the error line must name (the file, the fix)
    code: int = 1
    forbid: tuple[str, ...] = field(default=())  # files that must not exist afterwards (e.g. a pickle's payload)
    cause: tuple[str, ...] = ()  # what the `cause:` lines under the error must show (the framework's own words)


def _tiny_onnx(path: Path, external: bool = False) -> None:
    """A real model: image [batch,1,4,4] -> logits [batch,3]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(RANDOM.standard_normal((16, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([-1, 16], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["image", "shape"], ["flat"]), helper.make_node("MatMul", ["flat", "w"], ["logits"])],
        "tiny",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 4, 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [weight, shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if external:
        onnx.save(model, path, save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    else:
        onnx.save(model, path)


def _custom_op_onnx(path: Path) -> None:
    """A valid ONNX using an op from a domain no runtime knows (as MediaPipe or vendor exports do)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("FancyNorm", ["image"], ["out"], domain="com.example.vendor")],
        "custom",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, 4, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example.vendor", 1)])
    model.ir_version = 8
    onnx.save(model, path)


def scalar_input_onnx(path: Path) -> None:
    """A real model with a scalar input (as audio models take a sample rate): audio [batch,16] * sr."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT), helper.make_node("Mul", ["audio", "srf"], ["y"])],
        "scalar",
        [
            helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 16]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))

    def __init__(self, marker: str) -> None:
        self.marker = marker


def write_corpus(d: Path) -> Path:
    """Write every corpus file into `d`."""
    d.mkdir(parents=True, exist_ok=True)
    noise = RANDOM.bytes(4096)
    for suffix in (".pt2", ".onnx", ".tflite", ".keras", ".xml", ".h5", ".engine", ".pt"):
        (d / f"random{suffix}").write_bytes(noise)
    (d / "empty.onnx").write_bytes(b"")
    _tiny_onnx(d / "tiny.onnx")
    (d / "truncated.onnx").write_bytes((d / "tiny.onnx").read_bytes()[:150])
    _tiny_onnx(d / "nodata.onnx", external=True)
    (d / "nodata.onnx.data").unlink()
    with zipfile.ZipFile(d / "full.zip", "w") as z:
        z.writestr("model/data.pkl", b"x" * 2000)
        z.writestr("model/version", "3")
    (d / "truncated.pt2").write_bytes((d / "full.zip").read_bytes()[:300])
    (d / "corrupt.keras").write_bytes((d / "full.zip").read_bytes())  # a zip, but no Keras config inside
    (d / "full.zip").unlink()
    _custom_op_onnx(d / "custom-op.onnx")
    tests = Path(__file__).parents[1] / "unit"  # model code the conversion cases load as FILE:FACTORY, copied in
    shutil.copyfile(tests / "backends" / "onnx" / "export_route_models.py", d / "branchy.py")
    shutil.copyfile(tests / "converters" / "corrupted_export.py", d / "corrupted.py")
    scalar_input_onnx(d / "scalar-input.onnx")
    (d / "not-ir.xml").write_text("<html><body>a web page saved as .xml</body></html>")
    (d / "nobin.xml").write_text("<net name='x' version='11'><layers><layer id='0' type='Parameter'/></layers></net>")
    image = RANDOM.random((8, 1, 4, 4), dtype=np.float32)
    labels = np.arange(8) % 3
    np.savez(d / "good.npz", image=image, labels=labels)
    np.savez(d / "object.npz", image=np.array([image[0], "x"], dtype=object))
    (d / "text.npz").write_text("image,label\n0.1,3\n")
    np.savez(d / "pixels.npz", pixels=image, labels=labels)
    np.savez(d / "two-arrays.npz", pixels=image, mask=image > 0.5)
    np.savez(d / "labels-negative.npz", image=image, labels=np.where(labels == 2, -3, labels))
    np.savez(d / "labels-too-high.npz", image=image, labels=labels + 5)
    np.savez(d / "inf.npz", image=np.where(image > 0.9, np.inf, image).astype(np.float32))
    np.savez(d / "nan.npz", image=np.where(image > 0.9, np.nan, image).astype(np.float32), labels=labels)
    np.savez(d / "scalar.npz", image=np.float32(3.0))
    np.savez(d / "labels3d.npz", image=image, labels=np.ones((8, 3, 2), np.int64))
    np.savez(d / "wide-sets.npz", image=image, labels=np.eye(5, dtype=bool)[np.arange(8) % 5])  # label sets of 5 classes
    _shelf(d / "shelf", image)
    (d / "evil.pt").write_bytes(pickle.dumps(_Evil(str(d / "PWNED"))))
    (d / "factory.py").write_text(
        "import torch\n\ndef make():\n    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 3))\n"
    )
    (d / "list.json").write_text("[1, 2]")
    (d / "empty.json").write_text("{}")
    (d / "notjson.json").write_text("{'kind': ")
    (d / "validate-report.json").write_text(json.dumps({"schema_version": "1.0", "kind": "validate", "fidelity": {}, "gate": None}))
    (d / "existing-folder").mkdir(exist_ok=True)
    _recipe(d / "runs-negative.yaml", "latency:\n  runs: -3\n")
    _recipe(d / "batch-zero.yaml", "latency:\n  batch: 0\n")
    _recipe(d / "todo.yaml", "calibration:\n  path: TODO\n  samples: 300\n")
    (d / "not-yaml.yaml").write_text("model: [unclosed\n")
    (d / "recipe-list.yaml").write_text("- a\n- b\n")
    _recipe(d / "unknown-format.yaml", "", formats="[onnx, caffe]")
    return d


def _shelf(folder: Path, image: np.ndarray) -> None:
    """A folder of 3 images whose labels.json labels only the first."""
    from PIL import Image

    folder.mkdir(exist_ok=True)
    for i in range(3):
        Image.fromarray((image[i, 0] * 255).astype(np.uint8)).save(folder / f"{i}.png")
    (folder / "labels.json").write_text(json.dumps({"0.png": 1}))


def _recipe(path: Path, extra: str, formats: str = "[onnx]") -> None:
    path.write_text(
        f"version: 1\nmodel:\n  path: {path.parent / 'tiny.onnx'}\nvalidation:\n  path: {path.parent / 'good.npz'}\n"
        f"matrix:\n  formats: {formats}\n  precisions: [fp32]\nreport:\n  dir: {path.parent / 'reports'}\n{extra}"
    )


def _model_cases() -> list[Case]:
    cases = []
    for suffix in (".pt2", ".onnx", ".tflite", ".keras", ".xml", ".h5"):
        cases.append(Case(f"random bytes named {suffix}", ("info", f"{{d}}/random{suffix}"), (f"random{suffix}",)))
    convert = ("--to", "onnx", "-o", "{d}/out/c.onnx")
    cases += [
        Case(
            "a branch on the input's values", ("convert", "{d}/branchy.py:branchy", "-i", "x:1x4", *convert), ("branchy.py:", "torch.cond")
        ),
        Case(
            "an export that differs from its source", ("convert", "{d}/corrupted.py:corrupted", *convert), ("max abs diff", "--no-verify")
        ),
        Case("random bytes named .pt", ("info", "{d}/random.pt"), ("random.pt",)),
        Case("random bytes named .pt2", ("convert", "{d}/random.pt2", "--to", "onnx", "-o", "{d}/out/a.onnx"), ("random.pt2",)),
        Case("random bytes named .onnx", ("bench", "{d}/random.onnx", "--runs", "3"), ("random.onnx",)),
        Case("random bytes named .onnx", ("convert", "{d}/random.onnx", "--to", "openvino", "-o", "{d}/out/b.xml"), ("random.onnx",)),
        Case("random bytes named .tflite", ("bench", "{d}/random.tflite", "--runs", "3"), ("random.tflite",)),
        Case(
            "random bytes named .keras",
            ("convert", "{d}/random.keras", "--to", "tflite", "-o", "{d}/out/c.tflite"),
            ("random.keras", "not a .keras archive"),
        ),
        Case("random bytes named .xml", ("bench", "{d}/random.xml", "--runs", "3"), ("random.xml",)),
        Case("empty .onnx", ("info", "{d}/empty.onnx"), ("empty.onnx",)),
        Case("truncated .onnx", ("info", "{d}/truncated.onnx"), ("truncated.onnx",)),
        Case("truncated .onnx", ("bench", "{d}/truncated.onnx", "--runs", "3"), ("truncated.onnx",)),
        Case("truncated .pt2 (zip cut short)", ("info", "{d}/truncated.pt2"), ("truncated.pt2",)),
        Case("corrupt .keras (zip without a Keras config)", ("info", "{d}/corrupt.keras"), ("corrupt.keras",)),
        Case(
            "ONNX with an op OpenVINO lacks",
            ("convert", "{d}/custom-op.onnx", "--to", "openvino", "-o", "{d}/out/f.xml"),
            ("OpenVINO cannot convert", "onnxruntime"),
            cause=("FancyNorm",),
        ),
        Case("ONNX with an op no runtime has", ("bench", "{d}/custom-op.onnx", "--runs", "3"), ("custom-op.onnx", "FancyNorm")),
        Case("an .xml that is not OpenVINO IR", ("info", "{d}/not-ir.xml"), ("not-ir.xml", "not an OpenVINO IR")),
        Case("an OpenVINO .xml whose .bin is missing", ("bench", "{d}/nobin.xml", "--runs", "3"), ("nobin.bin", "missing")),
        Case("ONNX whose external .data is missing", ("info", "{d}/nodata.onnx"), ("nodata.onnx.data",)),
        Case("ONNX whose external .data is missing", ("bench", "{d}/nodata.onnx", "--runs", "3"), ("nodata.onnx.data",)),
        Case(
            "a malicious pickle as --weights",
            ("convert", "{d}/factory.py:make", "--weights", "{d}/evil.pt", "--to", "onnx", "-i", "image:1x1x4x4", "-o", "{d}/out/e.onnx"),
            ("evil.pt",),
            forbid=("PWNED",),
        ),
    ]
    return cases


def _data_cases() -> list[Case]:
    validate = ("validate", "{d}/tiny.onnx", "-r", "{d}/tiny.onnx", "--runs", "3", "--warmup", "1", "-d")
    quantize = ("convert", "{d}/tiny.onnx", "--to", "onnx", "-p", "int8", "-o", "{d}/out/q.onnx", "--calib")
    return [
        Case(".npz holding an object array", (*validate, "{d}/object.npz"), ("object.npz",)),
        Case(".npz holding an object array", (*quantize, "{d}/object.npz"), ("object.npz",)),
        Case("a text file named .npz", (*validate, "{d}/text.npz"), ("text.npz", "not a NumPy")),
        Case("data key matching no input", (*validate, "{d}/pixels.npz"), ("pixels", "image")),
        Case("data key matching no input", (*quantize, "{d}/pixels.npz"), ("pixels", "image")),
        Case("arrays none of which matches the input", (*validate, "{d}/two-arrays.npz"), ("'mask', 'pixels'", "['image']")),
        Case("labels of -3", (*validate, "{d}/labels-negative.npz"), ("outside the model's 3 classes", "-3", "--ignore-label -3")),
        Case("labels past the classes", (*validate, "{d}/labels-too-high.npz"), ("5, 6, 7", "--ignore-label 5")),
        Case("Inf in calibration data", (*quantize, "{d}/inf.npz"), ("inf.npz", "non-finite")),
        Case(
            "--min-map-kept as a percentage",
            (*quantize, "{d}/pixels.npz", "--min-map-kept", "97"),
            ("--min-map-kept 97 is not a fraction",),
        ),
        Case("a task convert does not know", (*quantize, "{d}/pixels.npz", "--task", "ranking"), ("convert --task takes", "'ranking'")),
        Case("NaN in validation data", (*validate, "{d}/nan.npz"), ("nan.npz", "non-finite")),
        Case("a scalar where a batch of images is expected", (*validate, "{d}/scalar.npz"), ("scalar.npz",)),
        Case("data file missing", (*validate, "{d}/missing.npz"), ("missing.npz",)),
        Case("labels neither a class per sample nor label sets", (*validate, "{d}/labels3d.npz"), ("labels3d.npz", "[8, 3, 2]")),
        Case("label sets wider than the class scores", (*validate, "{d}/wide-sets.npz"), ("5 classes", "scores 3")),
        Case("an image folder whose labels.json misses images", (*validate, "{d}/shelf"), ("labels.json", "2 of the 3 images")),
    ]


def _cli_cases() -> list[Case]:
    bench = ("bench", "{d}/tiny.onnx")
    return [
        Case("bench --runs 0", (*bench, "--runs", "0"), ("--runs",)),
        Case("bench --runs -3", (*bench, "--runs", "-3"), ("--runs",)),
        Case("bench --batch 0", (*bench, "--batch", "0"), ("--batch",)),
        Case("bench --warmup -1", (*bench, "--warmup", "-1"), ("--warmup",)),
        Case("an option that does not exist", (*bench, "--bogus"), ("--bogus", "edgekit bench --help")),
        Case("an option value of the wrong type", (*bench, "--runs", "abc"), ("--runs", "edgekit bench --help")),
        Case("a command that does not exist", ("benchmark", "{d}/tiny.onnx"), ("benchmark", "edgekit --help")),
        Case("bench --threads 0", (*bench, "--threads", "0"), ("--threads",)),
        Case("an --input that does not parse", (*bench, "--input", "image:1xAx28"), ("image:1xAx28",)),
        Case("a scalar model input with no value given", ("bench", "{d}/scalar-input.onnx", "--runs", "3"), ("sr", "--input sr=")),
        Case("a constant --input that is not a number", (*bench, "--input", "sr=fast:int64"), ("sr=fast",)),
        Case("an --input naming no model input", (*bench, "--input", "pixels:1x1x4x4", "--runs", "3"), ("pixels", "image")),
        Case(
            "validate --report under a file (fails before the run)",
            ("validate", "{d}/tiny.onnx", "-r", "{d}/tiny.onnx", "-d", "{d}/good.npz", "--report", "{d}/good.npz/r.json"),
            ("good.npz", "--report"),
        ),
        Case(
            "bench --report onto an existing folder",
            ("bench", "{d}/tiny.onnx", "--report", "{d}/existing-folder"),
            ("existing-folder", "--report"),
        ),
        Case(
            "validate --limit 0", ("validate", "{d}/tiny.onnx", "-r", "{d}/tiny.onnx", "-d", "{d}/good.npz", "--limit", "0"), ("--limit",)
        ),
        Case(
            "convert -o onto an existing folder",
            ("convert", "{d}/tiny.onnx", "--to", "onnx", "-o", "{d}/existing-folder"),
            ("existing-folder",),
        ),
        Case(
            "convert -o onto an existing folder",
            ("convert", "{d}/tiny.onnx", "--to", "openvino", "-o", "{d}/existing-folder"),
            ("existing-folder",),
        ),
        Case(
            "convert -o named as another format's file",
            ("convert", "{d}/tiny.onnx", "--to", "openvino", "-o", "{d}/out/m.openvino"),
            ("m.openvino", "m.xml"),
        ),
        Case(
            "convert -o named as another format's file",
            ("convert", "{d}/tiny.onnx", "--to", "tflite", "-o", "{d}/out/m.onnx"),
            ("m.onnx", ".tflite"),
        ),
        Case(
            "convert --calib-samples 0",
            (
                "convert",
                "{d}/tiny.onnx",
                "--to",
                "onnx",
                "-p",
                "int8",
                "--calib",
                "{d}/good.npz",
                "--calib-samples",
                "0",
                "-o",
                "{d}/out/s.onnx",
            ),
            ("--calib-samples",),
        ),
    ]


def _report_cases() -> list[Case]:
    return [
        Case("gate on a JSON list", ("gate", "{d}/list.json"), ("list.json",)),
        Case("gate on {}", ("gate", "{d}/empty.json"), ("empty.json",)),
        Case("gate on a file that is not JSON", ("gate", "{d}/notjson.json"), ("notjson.json",)),
        Case("gate on a validate report", ("gate", "{d}/validate-report.json"), ("validate-report.json",)),
        Case("recipe with runs: -3", ("run", "{d}/runs-negative.yaml"), ("runs-negative.yaml", "runs")),
        Case("recipe with batch: 0", ("run", "{d}/batch-zero.yaml"), ("batch-zero.yaml", "batch")),
        Case("recipe with a TODO left by init", ("run", "{d}/todo.yaml"), ("todo.yaml", "calibration.path (line 12)")),
        Case("recipe that is not YAML", ("run", "{d}/not-yaml.yaml"), ("not-yaml.yaml",)),
        Case("recipe that is a YAML list", ("run", "{d}/recipe-list.yaml"), ("recipe-list.yaml",)),
        Case("recipe with an unknown format", ("run", "{d}/unknown-format.yaml"), ("caffe",)),
    ]


CASES: list[Case] = [*_model_cases(), *_data_cases(), *_cli_cases(), *_report_cases()]


def case_id(case: Case) -> str:
    return f"{case.args[0]}: {case.name}"


def run_all(d: Path) -> list[dict]:
    """Every case through the real CLI, in two interpreters (one per core) that import the frameworks once."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    root = Path(__file__).parents[2]
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    argv = [[a.replace("{d}", str(d)) for a in case.args] for case in CASES]
    halves = [list(range(0, len(CASES), 2)), list(range(1, len(CASES), 2))]

    def batch(idx: list[int]) -> list[dict]:
        request = json.dumps({"cases": [argv[i] for i in idx], "cwd": str(d)})
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("batch_cli.py"))],
            input=request,
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        return json.loads(proc.stdout)

    with ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(batch, halves))
    results: list[dict] = [{}] * len(CASES)
    for idx, out in zip(halves, outputs, strict=True):
        for i, r in zip(idx, out, strict=True):
            results[i] = r
    return results


def markdown_table(d: Path) -> str:
    """docs/robustness.md's table, from a run of every case."""
    rows = ["| case | command | exit | message |", "|---|---|---|---|"]
    for case, result in zip(CASES, run_all(d), strict=True):
        shown = [ln for ln in result["stderr"].splitlines() if ln.startswith(("error: ", "hint: "))]
        line = "<br>".join(shown) or "(no error line)"
        line = line.replace(str(d) + os.sep, "").replace(str(d), ".").replace("|", "\\|")
        command = " ".join(a.replace("{d}/", "") for a in case.args)
        rows.append(f"| {case.name} | `edgekit {command}` | {result['code']} | {line} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    folder = write_corpus(Path(sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="edgekit-corpus-")))
    if sys.argv[1:2] == ["--table"]:
        print(markdown_table(folder))
