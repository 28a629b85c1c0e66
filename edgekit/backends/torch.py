"""PyTorch: the models edgekit starts from (exported programs, TorchScript, module:factory), run eagerly or compiled."""

from edgekit.backends import Backend

BACKEND = Backend(
    format="torch",
    suffixes={".pt2": "torch-export"},  # TorchScript's .pt/.ts are told apart from state dicts by their content
    runners={"torch": "edgekit.targets.torch:TorchRunner"},
    default_targets=("torch:cpu",),
    loader="edgekit.loaders.torch:for_conversion",
    source_only=True,
)
