"""edgekit: take a trained model to an edge runtime and prove it still works there."""

__version__ = "0.1.0"
