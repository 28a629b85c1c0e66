"""litert-torch's PT2E quantizer with the mobile-CNN patterns it misses (backends.torch.pt2e_patterns: conv + ReLU6
observed after the clamp, `x + y` adds, zero pads sharing their input's observer), and its static int8 config with --per-tensor and
--calib-method applied. Import lazily (it imports torch and litert-torch)."""

from __future__ import annotations

from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config

from edgekit.backends.torch.pt2e import static_config
from edgekit.backends.torch.pt2e_patterns import MobilePatterns
from edgekit.conversion import ConvertOptions


class LiteRTQuantizer(MobilePatterns, PT2EQuantizer):
    """PT2EQuantizer plus backends.torch.pt2e_patterns; `keep_float` modules stay float (accuracy control)."""


def litert_quantizer(options: ConvertOptions, keep_float: tuple[str, ...] = ()) -> tuple[LiteRTQuantizer, dict]:
    """The static int8 quantizer for `options` with the `keep_float` modules float, and its scheme for the provenance."""
    config, scheme = static_config(get_symmetric_quantization_config, options)
    return LiteRTQuantizer(keep_float).set_global(config), {
        "quantizer": "litert-torch PT2EQuantizer + backends.torch.pt2e patterns",
        **scheme,
    }
