"""Group-wise weight quantization: the group a layer takes when --group-size does not divide its input width.

One rule on every backend, NNCF's ADJUST (what optimum-intel uses): the largest power of two that divides the width,
if it is at least MIN_GROUP; otherwise the layer stays in int8 (NNCF's backup mode; ExecuTorch: one group per channel).
"""

from __future__ import annotations

import logging

log = logging.getLogger("edgekit")
MIN_GROUP = 32  # NNCF's min_adjusted_group_size


def adjusted_group(width: int, group: int) -> int | None:
    """The group of a layer `width` wide: `group` where it divides the width, else the largest power of two that
    does (it may be larger than `group`: 256 for a 256-wide layer asked for 96), else None (below MIN_GROUP)."""
    if group <= 0 or width % group == 0:
        return group
    power = width & -width
    return power if power >= MIN_GROUP else None


def group_fallback(widths: list[int], group: int) -> dict | None:
    """{width: group taken} for the input widths `group` does not divide, said in the log (None where it divides all);
    a group of None: that layer stays in int8."""
    odd = {w: adjusted_group(w, group) for w in sorted(set(widths)) if group > 0 and w % group}
    if not odd:
        return None
    taken = ", ".join(f"{w}: {g if g else 'int8'}" for w, g in odd.items())
    log.warning(
        "--group-size %d does not divide some layers' input widths; they take the largest power of two that does (%s)", group, taken
    )
    return {"rule": "the largest power of two that divides the width (NNCF's ADJUST); below 32: int8", "groups": odd}
