"""Data for calibration and validation: one source format, sampled once, checked before any work.

A source yields named numpy arrays (and labels where it has them) as `Samples`; adapters in
each backend turn `Samples` into what its calibrator wants (backends/<format>/calibration.py).
"""

from edgekit.calibration.samples import Samples, random_samples
from edgekit.calibration.sources import load_samples

__all__ = ["Samples", "load_samples", "random_samples"]
