"""Backends: one folder per model format holds everything that imports its framework (loader, runner, converters
from each source, int8 passes, debug capture, calibration adapter). They are declared in `edgekit.registry`
and imported only when used."""
