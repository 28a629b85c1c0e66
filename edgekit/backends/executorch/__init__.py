"""ExecuTorch: PyTorch's edge runtime. `.pte` programs lowered to the XNNPACK delegate (fp32, PT2E int8),
run by ExecuTorch's Python runtime. The whole backend lives in this package; the registry names it once."""

from edgekit.backends import Backend

BACKEND = Backend(
    format="executorch",
    suffixes={".pte": "executorch"},
    runners={"executorch": "edgekit.backends.executorch.run:ExecuTorchRunner"},
    default_targets=("executorch:cpu",),
    converters={"torch": "edgekit.backends.executorch.convert:TorchToExecutorch"},
    describer="edgekit.backends.executorch.describe:executorch_artifact",
    summary="edgekit.backends.executorch.describe:executorch_summary",
)
