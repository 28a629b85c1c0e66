"""Modules for tests/unit/backends/onnx/test_export_routes.py, loaded by `edgekit convert FILE:FACTORY`."""

import torch


class Branchy(torch.nn.Module):
    """Branches in Python on its input's values: torch.export cannot trace it, a TorchScript trace keeps one branch."""

    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x - 1


class CondBranch(torch.nn.Module):
    """The same branch as Branchy, written with torch.cond: both branches are in the graph."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


class Distances(torch.nn.Module):
    """Distances to three fixed centres: torch.cdist has no translation in the dynamo exporter, the TorchScript one has."""

    def __init__(self):
        super().__init__()
        self.register_buffer("centres", torch.arange(12, dtype=torch.float32).reshape(3, 4))

    def forward(self, x):
        return torch.cdist(x, self.centres)


class TakesLen(torch.nn.Module):
    """Scales by len() of its input: a trace bakes in the example's batch."""

    def forward(self, x):
        return x * len(x)


def branchy():
    return Branchy()


def cond_branch():
    return CondBranch()


def distances():
    return Distances()
