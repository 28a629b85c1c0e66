"""edgekit: take a trained model to an edge runtime and prove it still works there.

The commands are functions too: `edgekit.convert`, `quantize`, `prune`, `validate`, `bench`, `run`, `tune` and `gate`
take the commands' arguments and return typed results (docs/python-api.md). They load on first use, so
`import edgekit` imports no framework. No subpackage is named after a command, so each name means the function.
"""

__version__ = "0.1.0"
API = ("bench", "convert", "gate", "prune", "quantize", "run", "tune", "validate")
__all__ = [*API, "__version__"]


def __getattr__(name: str):
    """The API functions, from edgekit.api when first asked for (PEP 562)."""
    if name in API:
        from edgekit import api

        return getattr(api, name)
    raise AttributeError(f"module 'edgekit' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
