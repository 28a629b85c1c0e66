"""OpenVINO: conversion from PyTorch and ONNX, int8 (NNCF, or ONNX Runtime's QDQ for a CNN on x86), accuracy control,
the runtime on the CPU."""

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("nncf")

from edgekit.calibration import load_samples  # noqa: E402
from edgekit.conversion import CalibrationOptions, ConvertOptions  # noqa: E402
from edgekit.converters.pipeline import convert  # noqa: E402
from edgekit.errors import EdgekitError, RuntimeMissingError  # noqa: E402
from edgekit.metrics.compare import accuracy_percent, run_batches  # noqa: E402
from edgekit.source import open_source  # noqa: E402
from edgekit.targets import make_runner  # noqa: E402
from tests.conftest import INPUTS  # noqa: E402


@pytest.fixture(scope="module")
def ir(tmp_path_factory, fashion_source, demo_data):
    out = tmp_path_factory.mktemp("ir")
    calib = CalibrationOptions(str(demo_data[1]), 300)
    return {
        p: convert(
            fashion_source,
            "openvino",
            out / f"f.{p}.xml",
            # NNCF with 7-bit weights, which no host's kernel saturates (a CNN for x86-avx2/vnni/amx goes through ONNX Runtime: below)
            ConvertOptions(p, INPUTS, calib if p == "int8" else CalibrationOptions(), for_target="x86-avx512"),
        )
        for p in ("fp32", "fp16", "int8")
    }


@pytest.fixture(scope="module")
def test2k(small_test_npz):
    return load_samples(str(small_test_npz), specs=list(INPUTS))


@pytest.fixture(scope="module")
def garbage_calib(tmp_path_factory, demo_data) -> CalibrationOptions:
    """Calibration on images scaled by 0.01: ranges 100x too small, so plain int8 loses several points."""
    garbage = tmp_path_factory.mktemp("garbage") / "garbage.npz"
    with np.load(demo_data[1]) as npz:
        np.savez(garbage, image=npz["image"][:200] * 0.01)
    return CalibrationOptions(str(garbage), 200)


def _accuracy(path, samples, target=None):
    return accuracy_percent(run_batches(make_runner(open_source(str(path)), target), samples, 250)[0], samples.labels)


def test_ir_precisions_sizes_and_accuracy(ir, test2k, fashion_source):
    reference = accuracy_percent(run_batches(make_runner(fashion_source, inputs=list(INPUTS)), test2k, 250)[0], test2k.labels)
    assert [ir[p].precision for p in ("fp32", "fp16", "int8")] == ["fp32", "fp16", "int8"]
    assert ir["fp16"].size_bytes() < 0.6 * ir["fp32"].size_bytes() and ir["int8"].size_bytes() < 0.4 * ir["fp32"].size_bytes()
    assert ir["fp32"].path.with_suffix(".bin").exists() and ir["fp32"].inputs[0].name == "image"
    assert abs(_accuracy(ir["fp32"].path, test2k) - reference) < 0.05
    assert reference - _accuracy(ir["int8"].path, test2k) <= 0.5
    assert ir["int8"].meta["provenance"]["quantization"]["tool"] == "nncf"


def test_static_shapes_per_batch_give_stable_results(ir, test2k):
    # OpenVINO 2026.4.1 gave wrong logits for batch 1 after a batch-360 call on a dynamic model.
    runner = make_runner(open_source(str(ir["int8"].path)))
    first = {k: v[:1] for k, v in test2k.arrays.items()}
    before = runner.infer(first)[0]
    runner.infer({k: v[:360] for k, v in test2k.arrays.items()})
    np.testing.assert_array_equal(runner.infer(first)[0], before)
    assert runner.config()["INFERENCE_NUM_THREADS"] == str(runner.threads) and runner.runtime_ms() > 0


def test_onnx_to_ir_and_onnx_on_openvino(tmp_path, fashion_onnx, test2k):
    artifact = convert(open_source(str(fashion_onnx["fp32"])), "openvino", tmp_path / "from_onnx.xml", ConvertOptions("int8-weights"))
    assert artifact.precision == "int8-weights"
    onnx_on_ov = _accuracy(fashion_onnx["fp32"], test2k, "openvino:cpu")
    assert abs(onnx_on_ov - _accuracy(fashion_onnx["fp32"], test2k)) < 0.1


def test_an_int8_onnx_on_openvino_runs_as_the_ir_it_converts_to(tmp_path, fashion_onnx, test2k):
    """OpenVINO reads an .onnx as `--to openvino` converts it (ov.convert_model; Core.read_model builds another int8
    graph), so accuracy control's steps, scored as ONNX on OpenVINO, predict the IR it writes. The ONNX's Q/DQ are
    kept as they are: no calibration data is asked for."""
    ir = convert(open_source(str(fashion_onnx["int8"])), "openvino", tmp_path / "int8.xml", ConvertOptions("int8")).path
    outputs = [run_batches(make_runner(open_source(str(p)), "openvino:cpu"), test2k, 250)[0] for p in (fashion_onnx["int8"], ir)]
    np.testing.assert_array_equal(*outputs)


@pytest.fixture(scope="module")
def plain_int8(tmp_path_factory, fashion_source, garbage_calib, test2k):
    """The int8 IR without accuracy control for an ISA class, converted once for the module: (its path, its accuracy on test2k)."""
    folder, made = tmp_path_factory.mktemp("plain-int8"), {}

    def plain(isa: str) -> tuple:
        if isa not in made:
            ir = convert(fashion_source, "openvino", folder / f"{isa}.xml", ConvertOptions("int8", INPUTS, garbage_calib, for_target=isa))
            made[isa] = (ir.path, _accuracy(ir.path, test2k))
        return made[isa]

    return plain


@pytest.mark.parametrize(
    ("isa", "limit"),
    [
        ("x86-avx512", {"max_drop": 0.5}),
        ("x86-avx512", {"min_agreement": 99.0}),
        ("x86-avx512", {"min_cosine": 0.99}),
        ("x86-avx2", {"max_drop": 0.5}),
    ],
)
def test_accuracy_control_reverts_layers_until_the_limit_holds(
    tmp_path, fashion_source, garbage_calib, small_test_npz, test2k, plain_int8, isa, limit
):
    """NNCF's accuracy control where NNCF quantizes (x86-avx512), on top-1 accuracy, on agreement with fp32 or on the
    cosine with fp32's outputs (NNCF validates single items too); for x86-avx2 (as for VNNI and AMX) ONNX Runtime's
    loop, each step and the IR itself scored on OpenVINO."""
    from edgekit.backends.openvino.convert import ONNX_RUNTIME_ROUTE

    plain, plain_accuracy = plain_int8(isa)
    controlled = convert(
        fashion_source,
        "openvino",
        tmp_path / "ac.xml",
        ConvertOptions("int8", INPUTS, garbage_calib, for_target=isa, validation_data=str(small_test_npz), validation_samples=500, **limit),
    )
    notes = controlled.meta["provenance"]
    control = notes["quantization"]["accuracy_control"]
    assert control["reverted_to_float"] and control["max_drop_points"] == limit.get("max_drop")
    assert control["min_agreement"] == limit.get("min_agreement") and control["min_cosine"] == limit.get("min_cosine")
    final = control["final"]  # the written IR, scored again on OpenVINO on either route
    assert final["drop_points"] <= limit.get("max_drop", 100) and final["agreement"] >= limit.get("min_agreement", 0)
    assert final["cosine"] >= limit.get("min_cosine", 0)
    assert _accuracy(controlled.path, test2k) - plain_accuracy > 2.0
    if "min_agreement" in limit:
        fp32 = convert(fashion_source, "openvino", tmp_path / "fp32.xml", ConvertOptions("fp32", INPUTS))
        assert _agreement(controlled.path, fp32.path, test2k) > _agreement(plain, fp32.path, test2k) + 2.0
    if isa == "x86-avx2":
        assert notes["openvino"]["int8"] == ONNX_RUNTIME_ROUTE and control["validated_on"] == "openvino:cpu"
        assert final["drop_points"] < control["steps"][0]["drop_points"]


def test_an_ir_that_misses_the_limit_is_refused(tmp_path, fashion_source, small_test_npz, garbage_calib, plain_int8):
    """The written IR is scored again on OpenVINO (NNCF hands back its best model whether or not the limit holds)."""
    from edgekit.backends.openvino.convert import NNCF_MISSED, _validated_ir
    from edgekit.conversion import ConversionData
    from edgekit.errors import ConversionError

    ir, _ = plain_int8("x86-avx512")
    fp32 = convert(fashion_source, "openvino", tmp_path / "fp32.xml", ConvertOptions("fp32", INPUTS)).path
    data = ConversionData(None, load_samples(str(small_test_npz), specs=list(INPUTS), limit=300))
    options = ConvertOptions("int8", INPUTS, garbage_calib, min_agreement=100.0)
    with pytest.raises(ConversionError, match=r"misses the limit \(agreement >= 100.0%\) after NNCF's accuracy control: agreement"):
        _validated_ir(fp32, ir, data, options, NNCF_MISSED)
    assert _validated_ir(fp32, fp32, data, options, NNCF_MISSED)["agreement"] == 100.0


def _agreement(path, reference, samples) -> float:
    classes = [run_batches(make_runner(open_source(str(p))), samples, 250)[0].argmax(1) for p in (path, reference)]
    return float((classes[0] == classes[1]).mean() * 100)


def test_accuracy_control_needs_labels_both_flags_and_openvino(tmp_path, fashion_source, demo_data, fashion_onnx):
    calib = CalibrationOptions(str(demo_data[1]), 50)
    with pytest.raises(EdgekitError, match="--max-drop measures accuracy against labels, which calibration data does not hold"):
        convert(fashion_source, "openvino", tmp_path / "a.xml", ConvertOptions("int8", INPUTS, calib, max_drop=0.5))
    with pytest.raises(EdgekitError, match="--val is the data of accuracy control, which needs a limit"):
        convert(fashion_source, "openvino", tmp_path / "a.xml", ConvertOptions("int8", INPUTS, calib, validation_data=str(demo_data[0])))
    with pytest.raises(EdgekitError, match="not available"):
        convert(
            open_source(str(fashion_onnx["fp32"])),
            "onnx",
            tmp_path / "b.onnx",
            ConvertOptions("fp16", (), calib, validation_data=str(demo_data[0]), max_drop=1),
        )
    with pytest.raises(EdgekitError, match="has no labels"):
        convert(
            fashion_source,
            "openvino",
            tmp_path / "c.xml",
            ConvertOptions("int8", INPUTS, calib, validation_data=_unlabelled(tmp_path, demo_data), max_drop=1),
        )
    assert not list(tmp_path.glob("*.xml"))


def _unlabelled(tmp_path, demo_data):
    path = tmp_path / "nolabels.npz"
    with np.load(demo_data[1]) as npz:
        np.savez(path, image=npz["image"][:50])
    return str(path)


def test_missing_device_and_missing_bin_are_clear(tmp_path, ir):
    with pytest.raises(RuntimeMissingError, match="openvino:npu is not available here"):
        make_runner(open_source(str(ir["fp32"].path)), "openvino:npu").load()
    lonely = tmp_path / "lonely.xml"
    lonely.write_bytes(ir["fp32"].path.read_bytes())
    from edgekit.backends.openvino.loader import read_ir
    from edgekit.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="weights file lonely.bin is missing"):
        read_ir(lonely)


def _weight_scales(path) -> list[int]:
    """How many dequantization scales each int8 weight of an IR has (one per output channel, or one)."""
    import openvino as ov

    counts = []
    for op in ov.Core().read_model(str(path)).get_ordered_ops():
        weight = op.input(1).get_source_output().get_node() if op.get_type_name() in ("Convolution", "MatMul") else None
        if weight is not None and weight.get_type_name() == "Multiply":  # int8 Constant -> Convert -> Multiply(scale)
            counts.append(int(np.prod(weight.input(1).get_partial_shape().to_shape())))
    return counts


def _weight_codes(path) -> list[np.ndarray]:
    """The int8 weight codes of each Convolution and MatMul of an IR, as (output channels, inputs)."""
    import openvino as ov

    codes = []
    for op in ov.Core().read_model(str(path)).get_ordered_ops():
        if op.get_type_name() not in ("Convolution", "MatMul"):
            continue
        node = op.input(1).get_source_output().get_node()
        while node.get_type_name() != "Constant":  # Multiply(scale) <- Convert <- the int8 Constant
            node = node.input(0).get_source_output().get_node()
        data = node.get_data()
        if op.get_type_name() == "MatMul" and not op.get_attributes()["transpose_b"]:
            data = data.T
        codes.append(data.reshape(len(data), -1))
    return codes


def test_without_vnni_int8_is_onnx_runtimes_pair_safe_qdq_run_by_openvino_as_it_is(
    tmp_path, fashion_source, demo_data, test2k, ir, fashion_onnx, small_test_npz
):
    from edgekit.backends.openvino.convert import ONNX_RUNTIME_ROUTE
    from edgekit.quantization import pair_safe

    calib = CalibrationOptions(str(demo_data[1]), 300)
    int8 = convert(fashion_source, "openvino", tmp_path / "avx2.xml", ConvertOptions("int8", INPUTS, calib, for_target="x86-avx2"))
    notes = int8.meta["provenance"]
    assert (notes["quantization"]["tool"], notes["quantization"]["pair_safe_weights"]) == ("onnxruntime", True)
    assert notes["openvino"]["int8"] == ONNX_RUNTIME_ROUTE and sorted(notes["files"]) == ["avx2.bin", "avx2.xml.edgekit.json"]
    codes = _weight_codes(int8.path)  # 3 convolutions (3x3: 7-bit codes) and 2 MatMuls (adjacent inputs pair up)
    assert len(codes) == 5 and all(c.dtype == np.int8 for c in codes)
    assert max(pair_safe.worst_pair(c) for c in codes) <= pair_safe.LIMIT  # VPMADDUBSW's int16 sums cannot clip
    assert all(np.abs(c).max() <= 64 for c in codes[:3]) and all(np.abs(c).max() > 64 for c in codes[3:])  # finer than 7 bits
    reference = accuracy_percent(run_batches(make_runner(fashion_source, inputs=list(INPUTS)), test2k, 250)[0], test2k.labels)
    assert reference - _accuracy(int8.path, test2k) <= 0.5
    from edgekit.debug import DebugRequest, debug

    def compared_with(reference):
        return debug(DebugRequest(open_source(str(int8.path)), open_source(str(reference)), str(small_test_npz), 4))

    with_ir, with_onnx = compared_with(ir["fp32"].path), compared_with(fashion_onnx["fp32"])  # its names are the ONNX export's
    assert with_ir["matched"] < 3 and "--to onnx -o fp32.onnx" in with_ir["advice"]
    assert with_onnx["matched"] >= 9 and with_onnx["advice"] is None and with_onnx["rows"][-1]["cosine"] > 0.999


def _activation_highs(path) -> list[float]:
    """The upper range limit of each activation FakeQuantize of an IR, in graph order."""
    import openvino as ov

    ops = ov.Core().read_model(str(path)).get_ordered_ops()
    return [float(op.input_value(2).get_node().get_data().max()) for op in ops if op.get_type_name() == "FakeQuantize"]


def test_per_tensor_and_calib_method_change_what_nncf_writes(tmp_path, fashion_source, demo_data, ir):
    def int8(name, **options):
        calib = CalibrationOptions(str(demo_data[1]), 300, options.pop("method"))
        return convert(
            fashion_source, "openvino", tmp_path / name, ConvertOptions("int8", INPUTS, calib, for_target="x86-avx512", **options)
        )

    minmax, percentile = int8("mm.xml", method="minmax"), int8("pc.xml", method="percentile")
    per_tensor = int8("pt.xml", method="minmax", per_tensor=True)
    assert _weight_scales(minmax.path) == [32, 64, 64, 128, 10] and _weight_scales(per_tensor.path) == [1] * 5
    minmax_highs, percentile_highs = _activation_highs(minmax.path), _activation_highs(percentile.path)
    assert len(minmax_highs) >= 4
    pairs = list(zip(percentile_highs, minmax_highs, strict=True))  # the same quantizers, narrower ranges
    assert all(p <= m * 1.0001 for p, m in pairs) and any(p < 0.9 * m for p, m in pairs)
    notes = [a.meta["provenance"]["quantization"] for a in (ir["int8"], minmax, per_tensor, percentile)]
    assert [(n["method"], n["per_channel"], n["bias_correction"]) for n in notes] == [
        ("histogram", True, "full"),  # --calib-method auto: OpenVINO's default_calib_method
        ("minmax", True, "full"),
        ("minmax", False, "full"),
        ("percentile", True, "full"),
    ]


def test_entropy_calibration_is_refused_in_one_line(tmp_path):
    from tests.conftest import assert_clean_error, run_cli

    out = tmp_path / "m.xml"
    args = ("--calib", "zoo:fashion-mnist-calib", "--calib-method", "entropy", "--for-target", "arm64-dotprod", "-o", out)  # NNCF
    assert_clean_error(run_cli("convert", "zoo:fashion-cnn", "--to", "openvino", "-p", "int8", *args), "entropy", "percentile", "--to onnx")
    assert not out.exists()


def test_without_vnni_entropy_calibration_goes_where_the_quantizer_has_it(tmp_path, fashion_source, demo_data):
    """x86 (here x86-avx2): a CNN's int8 goes through ONNX Runtime, which has entropy (KL) calibration; a transformer keeps NNCF,
    which has none, and is refused before anything is written."""
    calib = CalibrationOptions(str(demo_data[1]), 100, "entropy")
    int8 = convert(fashion_source, "openvino", tmp_path / "kl.xml", ConvertOptions("int8", INPUTS, calib, for_target="x86-avx2"))
    quantization = int8.meta["provenance"]["quantization"]
    assert (quantization["tool"], quantization["method"]) == ("onnxruntime", "entropy")
    assert _weight_codes(int8.path)  # int8 constants in the IR
    transformer = ConvertOptions("int8", INPUTS, calib, for_target="x86-avx2", model_type="transformer")
    with pytest.raises(EdgekitError, match="--calib-method entropy is not available for a transformer") as info:
        convert(fashion_source, "openvino", tmp_path / "t.xml", transformer)
    assert "histogram" in info.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kl.bin", "kl.xml", "kl.xml.edgekit.json"]


def test_openvinos_converter_sends_no_telemetry_from_the_tests():
    """ovc's telemetry forks a process from a thread, which can deadlock a process whose main thread is inside a
    multi-threaded OpenBLAS call: tests/conftest.py sets its documented switch (CI=true) for the tests and their commands."""
    from openvino.tools.ovc.telemetry_utils import init_ovc_telemetry

    assert not init_ovc_telemetry().consent
