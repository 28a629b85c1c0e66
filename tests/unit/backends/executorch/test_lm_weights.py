"""ExecuTorch's int4 weights of a language model (lm_weights), on the zoo LM's trained weights and edgekit's calibration
text, in eager PyTorch: each group's scale searched against the calibration activations, a share of the body in int4
with the most sensitive layers int8, the head int8. The .pte written from it is judged in ExecuTorch's runtime in
tests/unit/test_text_generation.py."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchao", reason="pip install edgekit[executorch]")


@pytest.fixture(scope="module")
def zoo_lm():
    from edgekit.backends.torch.causal_lm import load_with_cache
    from edgekit.converters.causal_lm import DEFAULT_CALIB
    from edgekit.source import open_source
    from edgekit.validation.text_generation import load_tokens

    source = open_source("zoo:stdlib-lm")
    model = load_with_cache(source, 128)[0]
    ids = load_tokens(DEFAULT_CALIB, source, 8)[0]
    return model, ids[:4], ids[4:]


def _nll(model, rows) -> float:
    from edgekit.metrics.language import token_nll

    with torch.no_grad():
        return float(np.mean([token_nll(model(input_ids=torch.as_tensor(r[None])).logits.numpy(), r[None]) for r in rows]))


def test_each_groups_scale_is_the_one_with_the_least_error_on_the_calibration_activations(zoo_lm):
    from edgekit.backends.executorch.lm_weights import clipped_int4, input_energy

    model, calibration, _ = zoo_lm
    name, layer = next((n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear))
    energy = input_energy(model, calibration, {name: layer})[name]
    weight = layer.weight.detach()
    grid, scales, error, group = clipped_int4(weight, energy, 32)
    steps = grid.reshape(len(grid), -1, 32) / scales[..., None]
    assert group == 32 and torch.allclose(steps, steps.round(), atol=1e-4) and steps.abs().max() <= 8
    _, in_range, in_range_error, _ = clipped_int4(weight, energy, 32, shrinks=(1.0,))
    assert error < in_range_error  # the search found smaller scales (clipping) that pay on these weights
    assert (scales <= in_range + 1e-9).all() and (scales < in_range).any()
    unweighted = clipped_int4(weight, None, 32)
    weighted = lambda w: float((energy * (weight - w) ** 2).sum())  # noqa: E731
    assert weighted(grid) <= weighted(unweighted[0])  # weighting by the activations is what the error is judged by


def test_a_share_in_int4_keeps_the_layers_with_the_largest_int4_error_in_int8_and_the_head_int8(zoo_lm):
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import IntxUnpackedToInt8Tensor

    from edgekit.backends.executorch.lm_weights import clipped_int4, input_energy, quantize_weights

    model, calibration, held_back = zoo_lm
    body = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not model.get_output_embeddings()}
    energy = input_energy(model, calibration, body)
    errors = {n: clipped_int4(m.weight.detach(), energy[n], 32)[2] for n, m in body.items()}
    results = {}
    for ratio in (1.0, 0.5):
        quantized = copy.deepcopy(model)
        options = SimpleNamespace(precision="int4-weights", group_size=32, ratio=ratio)
        notes = quantize_weights(quantized, options, calibration)
        bits = {n: m.weight.target_dtype for n, m in quantized.named_modules() if isinstance(m, torch.nn.Linear)}
        assert all(isinstance(m.weight, IntxUnpackedToInt8Tensor) for m in quantized.modules() if isinstance(m, torch.nn.Linear))
        assert bits["lm_head"] == torch.int8 and notes["calibrated"] and notes["ratio"] == ratio
        int4 = {n for n, b in bits.items() if b == torch.int4}
        assert notes["quantized_linears"] == {"int4": len(int4), "int8": len(bits) - len(int4)}
        share = sum(body[n].weight.numel() for n in int4) / sum(m.weight.numel() for m in body.values())
        assert ratio - 0.15 <= share <= ratio
        assert max((errors[n] for n in int4), default=0) <= min((errors[n] for n in set(body) - int4), default=np.inf)
        results[ratio] = _nll(quantized, held_back)
    reference = _nll(model, held_back)
    assert reference < results[0.5] < results[1.0]  # int4 costs perplexity, and keeping the sensitive half int8 pays
