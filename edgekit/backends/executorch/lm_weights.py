"""A language model's Linear weights as XNNPACK runs them quantized, through torchao (in place).

int8-weights: 8da8w on every layer (int8 weights per output channel, int8 dynamic activations per token). Weight-only
int8 (torchao IntxWeightOnlyConfig) lowers to wrong numbers in executorch 1.5.1 (max abs logit error 8.9e3 against the
same model in eager), so it is not used.
int4-weights: 8da4w (ExecuTorch's LLM scheme: int4 weights in groups of --group-size, symmetric) on `--ratio` of the
body's weights, the rest and the head 8da8w (as NNCF's backup mode keeps the head int8 on ONNX and OpenVINO). Each
int4 group's scale is the one, among shrinks of the scale that keeps every weight in range, that minimizes the layer's
output error on the calibration tokens (each input channel weighted by its mean squared activation; without
calibration, unweighted), as AWQ's clipping search and NNCF's scale estimation choose. The int4 layers are those whose
weighted error is the smallest: the most sensitive stay int8.

Measured on SmolLM2-135M (eager torchao, held-back code / held-out prose perplexity ratios): every body layer int4 with
the head int4, torchao's own scale, 1.376 / 1.505; the head int8, 1.309 / 1.359; with the searched scales, 1.190 / 1.326.
GPTQ (a Hessian-compensated rounding, by hand: torchao's GPTQ does not take 8da4w) reached 1.143 on the held-back code
but 1.76 on prose: 16 x 128 calibration tokens of code overfit it, so it is not used. torchao's AWQ does not take
8da4w's tensors (no activation pre-scaling) in torchao 0.18.
"""

from __future__ import annotations

from edgekit.quantization.groups import adjusted_group, group_fallback

SHRINKS = (1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6)  # of the in-range scale, tried for each int4 group
INT4 = (-8, 7)


def quantize_weights(model, options, calibration=None) -> dict:
    """torchao in place on the model's Linear layers at options.precision (options.ratio of the body in int4); the
    notes for the provenance."""
    import torch
    from torchao.quantization import quantize_

    layers = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    if options.precision == "int8-weights":
        quantize_(model, _int8())
        return {"weights": "int8 per channel, int8 dynamic activations (torchao 8da8w)", "method": "RTN"}
    head = model.get_output_embeddings()
    body = {name: m for name, m in layers.items() if m is not head}
    group = options.group_size if options.group_size > 0 else None
    energy = input_energy(model, calibration, body) if calibration is not None else {}
    candidates = {}
    for name, layer in body.items():
        taken = adjusted_group(layer.in_features, group) if group else layer.in_features
        if taken:  # a width the group does not divide: quantization.groups' rule, as NNCF's (None: int8)
            candidates[name] = clipped_int4(layer.weight.detach(), energy.get(name), taken)
    chosen = least_sensitive(body, candidates, options.ratio or 1.0)
    for name in chosen:
        grid, scales, _error, taken = candidates[name]
        body[name].weight = torch.nn.Parameter(_int4_tensor(grid, scales, taken), requires_grad=False)
    quantize_(model, _int8(), filter_fn=lambda module, fqn: isinstance(module, torch.nn.Linear) and fqn not in chosen)
    groups = f"in groups of {group}" if group else "per channel"
    share = sum(body[n].weight.numel() for n in chosen) / sum(m.weight.numel() for m in body.values())
    return {
        "weights": f"int4 {groups}, symmetric, on {share:.0%} of the body's weights, the rest and the head int8 per channel; "
        "int8 dynamic activations (torchao 8da4w / 8da8w)",
        "group_size": group or -1,
        "group_fallback": group_fallback([m.in_features for m in body.values()], group or 0),
        "ratio": options.ratio or 1.0,
        "quantized_linears": {"int4": len(chosen), "int8": len(layers) - len(chosen)},
        "method": "scale search weighted by calibration activations" if energy else "scale search (no data)",
        "calibrated": bool(energy),
    }


def input_energy(model, calibration, layers: dict) -> dict:
    """Each layer's mean squared input per channel over the calibration token rows (diag(X^T X) / tokens)."""
    import torch

    sums, counts = {}, {}

    def hook(name):
        def record(_module, args, _out):
            x = args[0].detach().reshape(-1, args[0].shape[-1]).double()
            sums[name] = sums.get(name, 0) + (x * x).sum(0)
            counts[name] = counts.get(name, 0) + x.shape[0]

        return record

    handles = [layer.register_forward_hook(hook(name)) for name, layer in layers.items()]
    try:
        with torch.no_grad():
            for row in calibration:
                model(input_ids=torch.as_tensor(row[None]), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return {name: (sums[name] / counts[name]).float() for name in sums}


def clipped_int4(weight, energy, group: int, shrinks=SHRINKS):
    """`weight` [out, in] on the symmetric int4 grid in groups of `group`: (grid weights, scales [out, in/group], the
    weighted squared error, group); each group's scale the shrink in `shrinks` with the smallest error (energy-weighted
    where given)."""
    import torch

    rows, width = weight.shape
    blocks = weight.float().reshape(rows, width // group, group)
    weights = (energy if energy is not None else torch.ones(width)).reshape(1, width // group, group)
    in_range = torch.maximum(-blocks.amin(-1, keepdim=True) / -INT4[0], blocks.amax(-1, keepdim=True) / INT4[1]).clamp(min=1e-10)
    scales = torch.stack([in_range * shrink for shrink in shrinks])  # [shrinks, rows, groups, 1]
    errors = (weights * (blocks - _on_grid(blocks, scales)) ** 2).sum(-1, keepdim=True)
    best = errors.argmin(0, keepdim=True)  # the first of equal errors: the larger scale
    best_scale, best_error = scales.gather(0, best)[0], errors.gather(0, best)[0]
    grid = _on_grid(blocks, best_scale).reshape(rows, width)
    return grid, best_scale.reshape(rows, width // group), float(best_error.sum()), group


def least_sensitive(body: dict, candidates: dict, ratio: float) -> set[str]:
    """The layers in int4: the smallest int4 errors first, until their weights reach `ratio` of the body's."""
    budget = ratio * sum(m.weight.numel() for m in body.values())
    chosen, count = set(), 0
    for name in sorted(candidates, key=lambda n: candidates[n][2]):
        size = body[name].weight.numel()
        if count + size > budget + 1:
            break
        chosen.add(name)
        count += size
    return chosen


def _on_grid(blocks, scale):
    return (blocks / scale).round().clamp(*INT4) * scale


def _int4_tensor(grid, scales, group: int):
    """torchao's 8da4w weight tensor of weights already on the grid of `scales` (so they quantize exactly)."""
    import torch
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import IntxUnpackedToInt8Tensor

    return IntxUnpackedToInt8Tensor.from_hp(
        grid,
        (1, group),
        torch.int4,
        activation_quantization="int8_asym_per_token",
        intx_choose_qparams_algorithm=None,
        custom_scale=scales,
        custom_zero_point=torch.zeros_like(scales, dtype=torch.int8),
    )


def _int8():
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig
    from torchao.quantization.granularity import PerAxis

    return Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
