"""Exports in one process share one torch.onnx registry (built once per opset, handed out as copies): what torch's own
builder gives, and two exports through it write the same graph."""

import onnx

from edgekit.backends.onnx.torchlib_registry import share_torchlib_registry
from edgekit.conversion import ConvertOptions
from edgekit.converters.pipeline import convert
from tests.conftest import INPUTS


def _content(registry) -> dict:
    return {target: [(meta.onnx_function, meta.is_complex) for meta in metas] for target, metas in registry.functions.items()}


def test_exports_share_one_registry_as_torch_builds_it_and_write_the_same_graph(tmp_path, fashion_source):
    from torch.onnx._internal.exporter import _registration

    share_torchlib_registry()
    shared = _registration.ONNXRegistry.from_torchlib
    assert shared.edgekit_shared
    first, second = shared(), shared()
    assert _content(first) == _content(shared.built_anew()) and len(first.functions) > 100
    target = next(iter(first.functions))
    first.functions[target].append("added by a custom translation table")  # what export's custom_translation_table does
    assert shared().functions[target] == second.functions[target]  # not in the next export's copy

    a, b = (convert(fashion_source, "onnx", tmp_path / f"{n}.onnx", ConvertOptions("fp32", INPUTS)) for n in "ab")
    assert onnx.load(str(a.path)).graph == onnx.load(str(b.path)).graph
