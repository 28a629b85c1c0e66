"""Quieting native libraries that write to the process's stderr before any setting applies."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def stderr_silenced():
    """Point fd 2 at /dev/null for the block (absl/TFLite banners); Python exceptions still propagate."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
