"""An artifact used as it is: the same format at its own precision (a recipe that benchmarks an existing IR/.tflite)."""

from __future__ import annotations

import shutil
from pathlib import Path

from edgekit.conversion import ConversionData, Converter, ConvertOptions


class Passthrough(Converter):
    """Copies the file and its side files (the OpenVINO .bin) next to the output."""

    sources = ("openvino", "tflite")
    target_format = "as-is"
    precisions = {"fp32": False}
    package = "edgekit"
    import_name = "edgekit"

    def convert(self, model, specs, out: Path, options: ConvertOptions, data: ConversionData) -> dict:
        source = Path(model)
        shutil.copyfile(source, out)
        if source.with_suffix(".bin").exists() and source.suffix == ".xml":
            shutil.copyfile(source.with_suffix(".bin"), out.with_suffix(".bin"))
        return {"passthrough": str(source)}
