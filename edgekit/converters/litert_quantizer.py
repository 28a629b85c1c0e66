"""litert-torch's PT2E quantizer with the mobile-CNN patterns it misses (converters.pt2e: conv + ReLU6 observed after the
clamp, `x + y` adds, zero pads sharing their input's observer), and its static int8 config with --per-tensor and
--calib-method applied. Import lazily (it imports torch and litert-torch)."""

from __future__ import annotations

from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
from torch.fx import GraphModule

from edgekit.converters import ConvertOptions
from edgekit.converters.pt2e import annotate_after, annotate_before, static_config, unannotate_modules


class LiteRTQuantizer(PT2EQuantizer):
    """PT2EQuantizer plus converters.pt2e's patterns (static int8 with a global config).

    `keep_float`: module names (as `named_modules()` gives them) whose ops stay float (accuracy control)."""

    keep_float: tuple[str, ...] = ()

    def annotate(self, model: GraphModule) -> GraphModule:
        annotate_before(model, self.global_config)
        model = super().annotate(model)
        annotate_after(model, self.global_config)
        unannotate_modules(model, self.keep_float)
        return model


def litert_quantizer(options: ConvertOptions) -> tuple[LiteRTQuantizer, dict]:
    """The static int8 quantizer for `options`, and its scheme for the provenance."""
    config, scheme = static_config(get_symmetric_quantization_config, options)
    return LiteRTQuantizer().set_global(config), {"quantizer": "litert-torch PT2EQuantizer + converters.pt2e patterns", **scheme}
