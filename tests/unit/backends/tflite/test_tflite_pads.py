"""backends.tflite.pads: the explicit pads that litert-torch leaves in NCHW between transposes in int8 (TensorFlow's
SAME at stride 2, written out in PyTorch) folded into the convolutions, with the same outputs; a pad that is not SAME
stays, and a fold that would change the outputs is refused."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

pytest.importorskip("litert_torch")


def _tf_same_net():
    """Three stride-2 convolutions on explicitly padded inputs: two padded as TensorFlow's SAME (0, 1), one (1, 0)."""
    import torch
    import torch.nn.functional as F

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Conv2d(3, 8, 3, stride=2)
            self.depthwise = torch.nn.Conv2d(8, 8, 3, stride=2, groups=8)
            self.other = torch.nn.Conv2d(8, 8, 3, stride=2)
            self.head = torch.nn.Linear(8, 10)

        def forward(self, image):
            x = torch.relu(self.stem(F.pad(image, (0, 1, 0, 1))))
            x = torch.relu(self.depthwise(F.pad(x, (0, 1, 0, 1))))
            x = torch.relu(self.other(F.pad(x, (1, 0, 1, 0))))  # not SAME: must stay a pad
            return self.head(x.mean((2, 3)))

    torch.manual_seed(0)
    return Net().eval()


@pytest.fixture(scope="module")
def unfolded(tmp_path_factory):
    """The net as edgekit's int8 .tflite with the fold switched off, its calibration data and its op names."""
    import torch

    import edgekit.backends.tflite.from_torch as torch_tflite
    from edgekit.conversion import CalibrationOptions, ConvertOptions
    from edgekit.converters.pipeline import convert
    from edgekit.source import open_source

    folder = tmp_path_factory.mktemp("pads")
    net = _tf_same_net()
    image = torch.rand(2, 3, 32, 32)
    batch = {"image": {0: torch.export.Dim("batch")}}
    torch.export.save(torch.export.export(net, (image,), dynamic_shapes=batch), folder / "net.pt2")
    calib = folder / "calib.npz"
    np.savez(calib, image=np.random.default_rng(0).uniform(0, 1, (32, 3, 32, 32)).astype(np.float32))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch_tflite, "fold_same_pads", lambda path: 0)
        out = convert(
            open_source(str(folder / "net.pt2")),
            "tflite",
            folder / "net.tflite",
            ConvertOptions("int8", (), CalibrationOptions(str(calib), 32)),
        )
    return out.path, calib


def _ops(path):
    from edgekit.backends.tflite.loader import tflite_summary

    ops = tflite_summary(path)["ops"]
    return {name: ops.get(name, 0) for name in ("PAD", "TRANSPOSE")}


def _outputs(path, calib):
    from edgekit.backends.tflite.interpreter import loaded_interpreter

    model = loaded_interpreter(path)
    feed, out = model.get_input_details()[0], model.get_output_details()[0]
    results = []
    scale, zero = feed["quantization"]
    for sample in np.load(calib)["image"][:8]:
        value = sample[None] if not scale else np.clip(np.round(sample[None] / scale) + zero, -128, 127)  # an int8 input
        model.set_tensor(feed["index"], value.astype(feed["dtype"]))
        model.invoke()
        results.append(model.get_tensor(out["index"]).copy())
    return np.concatenate(results)


def test_same_pads_fold_into_their_convolutions_and_the_outputs_stay(unfolded, tmp_path):
    from edgekit.backends.tflite.pads import fold_same_pads

    original, calib = unfolded
    before = _ops(original)
    assert before["TRANSPOSE"] >= 3 and before["PAD"] == 3  # the layout detour this pass removes
    folded = tmp_path / "folded.tflite"
    shutil.copyfile(original, folded)
    assert fold_same_pads(folded) == 2  # the input's pad and the depthwise one; the (1, 0) pad is not SAME
    after = _ops(folded)
    assert after["PAD"] == 1 and after["TRANSPOSE"] == before["TRANSPOSE"] - 2
    np.testing.assert_array_equal(_outputs(folded, calib), _outputs(original, calib))
    assert fold_same_pads(folded) == 0  # nothing left to fold


def test_a_fold_that_changes_the_outputs_is_refused(unfolded, tmp_path, monkeypatch):
    """With SAME's widths computed the wrong way round, the (1, 0) pad matches and folds, the check sees the outputs
    change, and the file stays as converted."""
    import edgekit.backends.tflite.pads as tflite_pads

    original, _ = unfolded
    wrong = tmp_path / "wrong.tflite"
    shutil.copyfile(original, wrong)
    monkeypatch.setattr(tflite_pads, "_same", lambda *axis: [1, 0])
    assert tflite_pads.fold_same_pads(wrong) == 0
    assert wrong.read_bytes() == original.read_bytes()


def test_convert_folds_them_and_says_so(unfolded, tmp_path):
    """The real command: the provenance counts the pads folded, `edgekit info` prints it, one pad is left."""
    from tests.conftest import run_cli

    original, calib = unfolded
    out = tmp_path / "net.tflite"
    converted = run_cli("convert", original.with_name("net.pt2"), "--to", "tflite", "-p", "int8", "--calib", calib, "-o", out)
    assert converted.code == 0, converted.stderr
    info = run_cli("info", out)
    assert "2 explicit zero pad(s) folded" in " ".join(info.stdout.split())
    assert _ops(out)["PAD"] == 1


def test_a_graph_the_pass_cannot_read_stays_as_converted(unfolded, tmp_path, monkeypatch, caplog):
    """A failure inside the rewrite (here injected) leaves the converted file as it was, with a warning, not an error."""
    import edgekit.backends.tflite.pads as tflite_pads

    original, _ = unfolded
    copy = tmp_path / "copy.tflite"
    shutil.copyfile(original, copy)

    def broken(self, index):
        raise KeyError("an operator this pass does not know")

    monkeypatch.setattr(tflite_pads._Graph, "fold", broken)
    with caplog.at_level(logging.WARNING, logger="edgekit"):  # an earlier CLI run in this worker may have quietened it
        assert tflite_pads.fold_same_pads(copy) == 0
    assert copy.read_bytes() == original.read_bytes()
    assert "pads not folded" in caplog.text


def test_constants_stored_after_the_flatbuffer_are_kept_when_folding(unfolded, tmp_path):
    """litert-torch writes some models (its fp16 EfficientNet-Lite0) with the constants after the flatbuffer, each
    found by its offset into the file: the fold moves them into the model it packs again (packed without them, that
    model did not load: "Constant buffer 1 specified an out of range offset", and the conversion failed)."""
    from edgekit.backends.tflite.pads import fold_same_pads

    original, calib = unfolded
    external = tmp_path / "external.tflite"
    external.write_bytes(_with_constants_after_the_flatbuffer(original.read_bytes()))
    expected = _outputs(external, calib)
    np.testing.assert_array_equal(expected, _outputs(original, calib))  # the layout loads as it is
    assert fold_same_pads(external) == 2
    np.testing.assert_array_equal(_outputs(external, calib), expected)


def _with_constants_after_the_flatbuffer(model_bytes: bytes) -> bytes:
    """The same .tflite with every non-empty buffer's data stored after the flatbuffer (offset and size into the
    file, 16-byte aligned), as the TFLite schema lays out models over 2 GB."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model_bytes, 0))
    moved = [(buffer, bytes(np.asarray(buffer.data, np.uint8))) for buffer in model.buffers if buffer.data is not None and len(buffer.data)]
    for buffer, data in moved:
        buffer.data, buffer.offset, buffer.size = None, 2, len(data)  # placeholders of the final fields' size

    def packed() -> bytes:
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    end = len(packed())
    for buffer, data in moved:
        end += -end % 16
        buffer.offset, end = end, end + len(data)
    head = packed()
    tail = bytearray()
    for buffer, data in moved:
        tail += bytes(buffer.offset - len(head) - len(tail)) + data
    return head + bytes(tail)
