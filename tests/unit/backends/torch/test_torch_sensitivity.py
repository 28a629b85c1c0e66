"""The PyTorch sensitivity ranking (backends.torch.sensitivity) reruns, for each layer, only the ops its weight reaches,
from the reference pass's kept values: on the zoo's trained detector (branches, an upsampled feature map concatenated,
decoupled heads) it gives the losses the whole-module reruns give, to the last bit."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


def test_reruns_of_only_what_a_layer_reaches_give_the_whole_reruns_losses(monkeypatch):
    from edgekit.backends.torch import sensitivity
    from edgekit.calibration import load_samples
    from edgekit.conversion import load_for_conversion
    from edgekit.source import open_source

    module, specs = load_for_conversion(open_source("zoo:fashion-det"), [])
    module.eval()
    samples = load_samples("zoo:fashion-det-calib", specs=specs, limit=8)
    kept = []
    suffix_runs = sensitivity._SuffixRuns.of
    monkeypatch.setattr(sensitivity._SuffixRuns, "of", classmethod(lambda cls, *a: kept.append(suffix_runs(*a)) or kept[-1]))

    monkeypatch.setattr(sensitivity, "SUFFIX_FROM_SECONDS", 0.0)
    partial, total = sensitivity.torch_sensitivity(module, samples, specs, count=8)
    assert kept[-1] is not None  # the detector exported and its kept values fit
    reached = kept[-1].reached
    assert min(len(nodes) for nodes in reached.values()) < max(len(nodes) for nodes in reached.values())  # reruns of part of the graph

    monkeypatch.setattr(sensitivity, "SUFFIX_FROM_SECONDS", float("inf"))
    whole, _ = sensitivity.torch_sensitivity(module, samples, specs, count=8)
    assert [(s.name, s.loss) for s in partial] == [(s.name, s.loss) for s in whole]
    assert len({s.loss for s in whole}) > len(whole) // 2  # the layers' losses differ: a rerun that changed nothing would give 0s
