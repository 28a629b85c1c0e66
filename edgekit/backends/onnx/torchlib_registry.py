"""One ATen -> ONNX registry per process for torch.onnx's dynamo exporter.

torch.onnx.export(dynamo=True) builds its registry of torchlib functions anew on every export
(`ONNXRegistry.from_torchlib`): onnxscript parses the source of about 500 functions to read each one's domain. That is
2.3 s of a 6.2 s FashionCNN export on a 2-core Zen 3 (x86-avx2), paid again by every export in the process (an int8
conversion exports, a recipe exports per cell). The registry depends only on the opset, and an export reads it: only
a `custom_translation_table` adds to it, so each export gets its own copy of the lists of functions, built once.
"""

from __future__ import annotations

import functools


def share_torchlib_registry() -> None:
    """Make torch.onnx's `ONNXRegistry.from_torchlib` hand out copies of one registry per opset (idempotent). Where a
    torch version lacks that class method, exports build theirs as before."""
    from torch.onnx._internal.exporter import _registration

    registry = getattr(_registration, "ONNXRegistry", None)
    build = getattr(registry, "from_torchlib", None)
    if build is None or getattr(build, "edgekit_shared", False):
        return

    @functools.cache
    def built(opset_version):
        return build(opset_version=opset_version)

    def from_torchlib(cls, opset_version=_registration._constants.TORCHLIB_OPSET):
        shared = built(opset_version)
        copy = cls()
        copy._opset_version = shared._opset_version
        copy.functions = {target: list(metas) for target, metas in shared.functions.items()}
        return copy

    from_torchlib.edgekit_shared = True
    from_torchlib.built_anew = build  # torch's own, for a check against it
    registry.from_torchlib = classmethod(from_torchlib)
