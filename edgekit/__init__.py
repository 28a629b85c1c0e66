"""edgekit: take a trained model to an edge runtime and prove it still works there.

The commands are functions too: `edgekit.convert`, `quantize`, `prune`, `validate`, `bench`, `run` and `gate`
take the commands' arguments and return typed results (docs/python-api.md). They load on first use, so
`import edgekit` imports no framework.
"""

import sys
import types

__version__ = "0.1.0"
API = ("bench", "convert", "gate", "prune", "quantize", "run", "validate")
__all__ = [*API, "__version__"]


class _Edgekit(types.ModuleType):
    """`edgekit.validate` is the function even after the `edgekit.validate` package is imported (which sets the
    attribute to the package); the package stays importable by name (`from edgekit.metrics.gate import ...`)."""

    def __getattribute__(self, name: str):
        if name in API:
            from edgekit import api

            return getattr(api, name)
        return super().__getattribute__(name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *API})


sys.modules[__name__].__class__ = _Edgekit
