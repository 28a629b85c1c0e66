"""ExecuTorch's XNNPACK PT2E quantizer with the mobile-CNN patterns it misses (backends.torch.pt2e_patterns: conv + ReLU6
observed after the clamp, zero pads sharing their input's observer), and its static int8 config with --per-tensor and
--calib-method applied. Import lazily (it imports torch and ExecuTorch)."""

from __future__ import annotations

from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

from edgekit.backends.torch.pt2e import static_config
from edgekit.backends.torch.pt2e_patterns import MobilePatterns
from edgekit.conversion import ConvertOptions


class MobileXNNPACKQuantizer(MobilePatterns, XNNPACKQuantizer):
    """XNNPACKQuantizer plus backends.torch.pt2e_patterns; `keep_float` modules stay float (the sensitivity search)."""


def xnnpack_quantizer(options: ConvertOptions, keep_float: tuple[str, ...] = ()) -> tuple[MobileXNNPACKQuantizer, dict]:
    """The static int8 quantizer for `options` with the `keep_float` modules float, and its scheme for the provenance."""
    config, scheme = static_config(get_symmetric_quantization_config, options)
    return MobileXNNPACKQuantizer(keep_float).set_global(config), {
        "quantizer": "ExecuTorch XNNPACKQuantizer + backends.torch.pt2e patterns",
        **scheme,
    }
