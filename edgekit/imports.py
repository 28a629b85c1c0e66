"""Import user code named as `package.module:name` or `path/to/file.py:name`."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from edgekit.errors import EdgekitError


def import_module(name: str):
    """Import a module by dotted name or by .py file path."""
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise EdgekitError(f"file not found: {name}", hint="give path/to/file.py:function")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(path.stem, module)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EdgekitError(
            f"cannot import module '{name}' ({exc})", hint="check the module name and that it is installed or on PYTHONPATH"
        ) from None


def import_attr(spec: str, what: str = "function"):
    """The object named by `module:name`."""
    module_name, _, attr = spec.rpartition(":")
    obj = getattr(import_module(module_name), attr, None)
    if obj is None:
        raise EdgekitError(f"'{attr}' not found in {module_name}", hint=f"name an existing {what} as module:{what}")
    return obj
