"""Routes, not dead ends: a net shaped like MTCNN's O-Net (conv + PReLU, ceil-mode max pooling, the last feature map
permuted before its dense layers, a PReLU after the first Linear) breaks XNNPACK's channels-last pass ("Attempting to
convert non-NHWC compatible node to NHWC": XNNPACK runs PReLU NHWC, and the PReLU after the Linear is 2-D). The
ExecuTorch converter tries its next route, leaves that node to the portable kernels, and says so: the provenance lists
each route tried and why it failed, the route taken, and the share of ops outside the delegate. The .pte matches the
PyTorch module on real photo crops."""

from __future__ import annotations

import functools
import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("executorch", reason="pip install edgekit[executorch]")

SPEC = f"{__name__}:face_net"
SIDE = 48
CHANNELS_LAST = "ChannelsLastTaggedReshapePass: AssertionError: Attempting to convert non-NHWC compatible node to NHWC"


class FaceNet(torch.nn.Module):
    """MTCNN O-Net's shape: four conv + PReLU stages with ceil-mode pooling, the feature map permuted to (W, H, C)
    order and flattened into Linear + PReLU, then a face/no-face softmax, 4 box values and 10 landmark values."""

    edgekit_inputs = (f"image:batchx3x{SIDE}x{SIDE}",)

    def __init__(self) -> None:
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(
            *(nn.Conv2d(3, 32, 3), nn.PReLU(32), nn.MaxPool2d(3, 2, ceil_mode=True)),
            *(nn.Conv2d(32, 64, 3), nn.PReLU(64), nn.MaxPool2d(3, 2, ceil_mode=True)),
            *(nn.Conv2d(64, 64, 3), nn.PReLU(64), nn.MaxPool2d(2, 2, ceil_mode=True)),
            *(nn.Conv2d(64, 128, 2), nn.PReLU(128)),
        )
        self.dense = nn.Sequential(nn.Linear(128 * 3 * 3, 256), nn.PReLU(256))
        self.face, self.box, self.landmarks = nn.Linear(256, 2), nn.Linear(256, 4), nn.Linear(256, 10)

    def features(self, image):
        return self.body(image).permute(0, 3, 2, 1).contiguous().flatten(1)

    def heads(self, features):
        x = self.dense(features)
        return self.face(x), self.box(x), self.landmarks(x)

    def forward(self, image):
        face, box, landmarks = self.heads(self.features(image))
        return torch.softmax(face, dim=1), box, landmarks


def targets(images):
    """What the heads learn from a photo crop: grey photo or colour (face), mean R, G, B and contrast (box), and
    the brightness of a 2x5 grid of regions (landmarks)."""
    grey = (images.std(1).mean((1, 2)) < 1e-3).long()
    box = torch.cat([images.mean((2, 3)), images.std((1, 2, 3))[:, None]], 1)
    landmarks = torch.nn.functional.adaptive_avg_pool2d(images.mean(1, keepdim=True), (2, 5)).flatten(1)
    return grey, box, landmarks


@functools.cache
def face_net() -> FaceNet:
    """The net with seeded convolutions and its dense layers and heads fitted to `targets` of 96 real photo crops
    (about a second, on one thread: the same weights on any machine)."""
    torch.manual_seed(0)
    net = FaceNet()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.enable_grad():  # a caller's no_grad would stop the fitting
            _fit_heads(net)
    finally:
        torch.set_num_threads(threads)
    return net.eval()


def _fit_heads(net: FaceNet, steps: int = 300) -> None:
    from edgekit.zoo.photos import photo_crops

    images = torch.from_numpy(photo_crops(96, SIDE, seed=3))
    grey, box, landmarks = targets(images)
    with torch.no_grad():
        features = net.features(images)
    heads = (net.dense, net.face, net.box, net.landmarks)
    optimizer = torch.optim.Adam([p for head in heads for p in head.parameters()], 3e-3)
    for _ in range(steps):
        face, b, lm = net.heads(features)
        loss = torch.nn.functional.cross_entropy(face, grey) + 10 * ((b - box) ** 2).mean() + 10 * ((lm - landmarks) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def _crops(tmp_path_factory, name: str, seed: int):
    """32 real photo crops (not those the heads were fitted on) as the net's input, in an .npz."""
    import numpy as np

    from edgekit.zoo.photos import photo_crops

    path = tmp_path_factory.mktemp("crops") / f"{name}.npz"
    np.savez(path, image=photo_crops(32, SIDE, seed=seed))
    return path


@pytest.fixture(scope="module")
def crops(tmp_path_factory):
    return _crops(tmp_path_factory, "crops", seed=1)


def _convert(tmp_path_factory, precision: str):
    import edgekit
    from edgekit.fileio import SIDECAR_SUFFIX

    out = tmp_path_factory.mktemp(precision) / f"face.{precision}.pte"
    calib = {"calib": str(_crops(tmp_path_factory, "calib", seed=2)), "keep_sensitive": False} if precision == "int8" else {}
    edgekit.convert(SPEC, to="executorch", precision=precision, output=str(out), **calib)
    return out, json.loads(out.with_name(out.name + SIDECAR_SUFFIX).read_text())


@pytest.fixture(scope="module")
def fp32(tmp_path_factory):
    return _convert(tmp_path_factory, "fp32")


@pytest.fixture(scope="module")
def int8(tmp_path_factory):
    return _convert(tmp_path_factory, "int8")


def _assert_portable_route_taken(provenance: dict) -> None:
    """The default route failed on the channels-last assert, the per-op one was skipped (a one-node layout failure fails
    alike as its own partition), the portable one was taken with the 2-D PReLU left outside the delegate, and the share
    outside is reported."""
    assert provenance["routes"] == [
        {"route": "xnnpack", "result": "failed", "why": CHANNELS_LAST},
        {"route": "xnnpack-per-op", "result": "skipped", "why": f"it fails alike on: {CHANNELS_LAST}"},
        {"route": "xnnpack+portable", "result": "taken", "why": "left to portable kernels: prelu.default on a 2-D tensor"},
    ]
    fallback = provenance["fallback"]
    assert fallback["not_delegated_ops"] == {"aten_gt_scalar": 1, "aten_where_self": 1}, fallback  # the PReLU, decomposed
    assert 0 < fallback["percent"] < 10 and fallback["delegated_ops"]["aten_convolution_default"] == 4


def _fidelity(pte, crops) -> list:
    """The .pte against the PyTorch module on the crops: each output's api.results.Fidelity."""
    import edgekit

    fidelity = edgekit.validate(str(pte), reference=SPEC, data=str(crops), runs=2, warmup=0).fidelity
    assert [f.name for f in fidelity] == ["output_0", "output_1", "output_2"]
    return fidelity


def _figures(fidelity) -> list[str]:
    return [
        f"{f.name}: cosine {f.cosine_mean:.5f} (min {f.cosine_min:.5f}), max abs {f.max_abs:.3g}, top-1 {f.top1_agreement}"
        for f in fidelity
    ]


def test_fp32_lowers_by_the_portable_route_and_matches_torch(fp32, crops):
    pte, provenance = fp32
    _assert_portable_route_taken(provenance)
    fidelity = _fidelity(pte, crops)
    assert all(f.cosine_min > 0.99999 and f.max_abs < 1e-4 for f in fidelity), _figures(fidelity)


def test_int8_lowers_by_the_portable_route_and_stays_close(int8, crops):
    pte, provenance = int8
    _assert_portable_route_taken(provenance)
    assert provenance["fallback"]["delegated_ops"]["quantized_decomposed_dequantize_per_channel_default"] > 0  # int8 weights
    face, box, landmarks = fidelity = _fidelity(pte, crops)  # calibrated on other crops
    assert all(f.cosine_mean > 0.999 and f.cosine_min > 0.99 for f in (box, landmarks)), _figures(fidelity)
    assert face.top1_agreement >= 90 and face.cosine_mean > 0.995 and face.max_abs < 0.2, _figures(fidelity)  # probabilities


def test_the_net_learned_its_targets():
    """The fitted heads mean something on crops they were not fitted on, so the comparisons above compare signal."""
    from edgekit.zoo.photos import photo_crops

    images = torch.from_numpy(photo_crops(32, SIDE, seed=1))
    grey, box, landmarks = targets(images)
    with torch.no_grad():
        face, b, lm = face_net()(images)
    assert (face.argmax(1) == grey).float().mean() >= 0.75
    assert (b - box).abs().mean() < 0.5 * box.std() and (lm - landmarks).abs().mean() < 0.5 * landmarks.std()


def test_a_model_xnnpack_takes_whole_takes_the_first_route():
    from edgekit.backends.executorch.convert import lower_by_routes

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.PReLU(4), torch.nn.MaxPool2d(2, ceil_mode=True)).eval()
    with torch.no_grad():
        lowered = lower_by_routes(torch.export.export(net, (torch.rand(1, 3, 9, 9),)))
    assert lowered.routes == [{"route": "xnnpack", "result": "taken", "why": None}]
    assert lowered.split["percent"] == 0.0 and lowered.program.buffer


def test_every_route_failing_names_each_failure_and_a_hint_from_the_error(monkeypatch):
    from edgekit.backends.executorch import convert
    from edgekit.errors import ConversionError

    def nhwc():
        cause = AssertionError("\x1b[31mAttempting to convert non-NHWC compatible node to NHWC\x1b[0m\nmore")
        raise RuntimeError(
            "An error occurred when running the 'ChannelsLastTaggedReshapePass' pass after the following passes: []"
        ) from cause

    def other():
        raise ValueError("no kernel for op")

    routes = (convert.Route("a", convert.lowered_with(nhwc)), convert.Route("b", convert.lowered_with(nhwc)))
    monkeypatch.setattr(convert, "ROUTES", (*routes, convert.Route("c", convert.lowered_with(other))))
    program = torch.export.export(torch.nn.Linear(2, 2), (torch.zeros(1, 2),))
    with pytest.raises(ConversionError) as raised:
        convert.lower_by_routes(program)
    message, hint = raised.value.message, raised.value.hint
    assert message.startswith("ExecuTorch could not lower the model by any route: a, b: ChannelsLastTaggedReshapePass: "), message
    assert "AssertionError: Attempting to convert non-NHWC compatible node to NHWC; c: " in message and "\x1b" not in message
    assert message.endswith("ValueError: no kernel for op") and "\n" not in message
    assert "channels-last (NHWC)" in hint and "--to onnx" in hint and "torch.cond" not in hint, hint


class Branching(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1


def branching():
    return Branching()


def test_a_data_dependent_branch_is_named_with_torch_cond(tmp_path):
    import edgekit
    from edgekit.errors import ConversionError

    with pytest.raises(ConversionError) as raised:
        edgekit.convert(f"{__name__}:branching", to="executorch", inputs=["x:1x3"], output=str(tmp_path / "b.pte"))
    message, hint = raised.value.message, raised.value.hint
    assert message.startswith("torch.export could not trace the model: at ") and "(`return x * 2 if x.sum() > 0 else x - 1`)" in message
    assert "GuardOnDataDependentSymNode: Could not guard on data-dependent expression" in message, message
    assert "torch.cond" in hint and "--to onnx" in hint and "NHWC" not in hint, hint
