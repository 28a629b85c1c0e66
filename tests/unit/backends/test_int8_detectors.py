"""int8 keeps raw-head detectors on every runtime. A YOLOv8-shaped head (a box distribution per side whose softmax reads
a view of the strides' concatenated heads, sigmoid class heads with very negative logits, the boxes in input pixels
concatenated with the class probabilities) keeps its probabilities and boxes through ONNX Runtime, OpenVINO, LiteRT
and ExecuTorch int8 (backends.torch.pt2e_patterns: annotate_concats, float_uneven_concats, fix_bounded_outputs); the zoo
detector keeps fp32's detections on each (e2e)."""

import numpy as np
import pytest
import torch
from torch import nn

import edgekit
from edgekit.calibration import Samples
from edgekit.metrics.compare import run_batches
from edgekit.source import open_source
from edgekit.targets import make_runner

SUFFIXES = {"onnx": "onnx", "openvino": "xml", "tflite": "tflite", "executorch": "pte"}
PACKAGES = {"onnx": "onnxruntime", "openvino": "openvino", "tflite": "litert_torch", "executorch": "executorch"}


class RawHeadDetector(nn.Module):
    """Untrained (seeded) and small: strides 4 and 8 on 32x32, each with a box head (4 x REG_MAX bins: DFL) and a class
    head biased very negative, as trained detectors' are; decoded as FashionDet is, to [N, 4 + 3, 80]."""

    edgekit_inputs = ("image:batchx1x32x32",)
    strides, reg_max, classes = (4, 8), 8, 3

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, 4, 1), nn.ReLU())
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
        self.box = nn.ModuleList(nn.Conv2d(c, 4 * self.reg_max, 1) for c in (8, 16))
        self.cls = nn.ModuleList(nn.Conv2d(c, self.classes, 1) for c in (8, 16))
        with torch.no_grad():  # logits -13..3 (probabilities up to 0.97), bins about +-3: softmax maxima under 1
            for head, gain, bias in zip(self.cls, (32.0, 64.0), (1.0, -3.0), strict=True):
                head.weight.mul_(gain)
                head.bias.fill_(bias)
            for head, gain in zip(self.box, (5.0, 8.0), strict=True):
                head.weight.mul_(gain)
        self.dfl = nn.Conv2d(self.reg_max, 1, 1, bias=False).requires_grad_(False)
        self.dfl.weight.data[:] = torch.arange(self.reg_max, dtype=torch.float32).view(1, -1, 1, 1)
        points, strides = [], []
        for s in self.strides:
            ys, xs = torch.meshgrid(torch.arange(32 // s) + 0.5, torch.arange(32 // s) + 0.5, indexing="ij")
            points.append(torch.stack([xs.flatten(), ys.flatten()]))
            strides.append(torch.full((1, (32 // s) ** 2), float(s)))
        self.register_buffer("points", torch.cat(points, 1))
        self.register_buffer("anchor_strides", torch.cat(strides, 1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        levels = [self.stem(image)]
        levels.append(self.down(levels[0]))
        bins = torch.cat([head(x).flatten(2) for head, x in zip(self.box, levels, strict=True)], 2)
        logits = torch.cat([head(x).flatten(2) for head, x in zip(self.cls, levels, strict=True)], 2)
        n, _, a = bins.shape
        lt, rb = self.dfl(bins.view(n, 4, self.reg_max, a).transpose(2, 1).softmax(1)).view(n, 4, a).chunk(2, 1)
        box = torch.cat([self.points + (rb - lt) / 2, lt + rb], 1) * self.anchor_strides
        return torch.cat([box, logits.sigmoid()], 1)


def raw_head_detector() -> RawHeadDetector:
    return RawHeadDetector().eval()


@pytest.fixture(scope="module")
def noise(tmp_path_factory):
    """32 calibration images (an .npz) and 16 others to compare on: uniform noise."""
    rng = np.random.default_rng(0)
    calib = tmp_path_factory.mktemp("raw-head") / "calib.npz"
    np.savez(calib, image=rng.random((32, 1, 32, 32), dtype=np.float32))
    return calib, rng.random((16, 1, 32, 32), dtype=np.float32)


@pytest.mark.parametrize("fmt", SUFFIXES)
def test_int8_keeps_a_raw_head_detectors_probabilities_and_boxes(fmt, noise, tmp_path):
    """One int8 scale for boxes (0..40 px) and probabilities rounded the probabilities by up to 0.12 (mean 0.023) on
    ExecuTorch; on LiteRT the box softmax took its reader's scale and the .tflite failed to load."""
    pytest.importorskip(PACKAGES[fmt])
    calib, images = noise
    artifact = edgekit.convert(f"{__name__}:raw_head_detector", fmt, tmp_path / f"det.{SUFFIXES[fmt]}", precision="int8", calib=str(calib))
    runner = make_runner(open_source(str(artifact.path)))
    runner.load()
    out = run_batches(runner, Samples({runner.inputs[0].name: images}).bind(runner.inputs), 1)[0]
    with torch.no_grad():
        ref = raw_head_detector()(torch.from_numpy(images)).numpy()
    probabilities = np.abs(out[:, 4:] - ref[:, 4:])
    assert probabilities.mean() < 0.005 and probabilities.max() < 0.1
    assert np.abs(out[:, :4] - ref[:, :4]).max() < 2.0  # input pixels


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", ["openvino", "tflite", "executorch"])  # ONNX Runtime's: tests/unit/validation/test_task_validation.py
def test_int8_keeps_the_zoo_detectors_detections(fmt, tmp_path):
    """zoo:fashion-det in int8 from its default calibration set (64 of its canvases), judged on 100 canvases of its
    validation set: at least 0.95 mAP@0.5 against fp32's confident detections, at most 1 point of labelled mAP@0.5 lost,
    at most 2 of mAP@0.5:0.95 (its box decoding in float: all-int8 lost 4.7 on OpenVINO, 4.6 on LiteRT, 5.4 on ExecuTorch)."""
    pytest.importorskip(PACKAGES[fmt])
    artifact = edgekit.convert("zoo:fashion-det", fmt, tmp_path / f"det.{SUFFIXES[fmt]}", precision="int8", calib_samples=64)
    report = edgekit.validate(str(artifact.path), limit=100, runs=1, warmup=0)
    assert report.task_metrics["vs_reference"]["map50"] >= 0.95
    if fmt == "openvino":  # a detector's int8 is NNCF's on OpenVINO (backends.openvino.convert.dense_outputs)
        assert artifact.provenance["quantization"]["tool"] == "nncf"
        assert artifact.provenance["quantization"]["preset"].startswith("mixed")  # asymmetric activations for a detector
    assert report.accuracy["drop_points"] <= 1.0
    labelled = report.task_metrics["vs_labels"]
    assert labelled["artifact_map50_95"] >= labelled["reference_map50_95"] - 0.02
    assert report.int8_coverage["layers"] >= 10 and report.int8_coverage["macs_share"] >= 0.95, (
        report.int8_coverage
    )  # read from the runtime
