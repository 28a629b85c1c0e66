"""Train the zoo's DBNet-style text detector (zoo:text-db) on rendered text pages; write its weights and ONNX.

Writes edgekit/zoo/data/: text_db.pt (state dict) and text_db.onnx (opset 17, batch, height and width dynamic:
the model a user brings, as DBNet exports ship). Pages come from edgekit.zoo.text_pages (seeds 1000+ for
training; held-out pages use other seeds). Loss as DBNet's: BCE on the probability map (hard negatives 3:1),
L1 on the threshold map inside the dilated boxes, dice on the binary map. ~3-4 minutes on one core.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from edgekit.zoo.models import TextDB
from edgekit.zoo.text_pages import DB_ONNX, DB_WEIGHTS, THRESH_MIN, pixel_scores, text_pages

SEED, BATCH, STEPS = 0, 8, 800
SIZES = ((128, 160), (160, 224), (192, 256), (128, 256))


def main() -> None:
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # on a loaded 2-core host two OpenMP threads run a step 10-30x slower than one
    model = TextDB()
    start = time.perf_counter()
    pools = [{k: torch.from_numpy(v) for k, v in text_pages(64, 1000 + i, h, w).items()} for i, (h, w) in enumerate(SIZES)]
    print(f"pages rendered in {time.perf_counter() - start:.0f}s")
    steps = train(model, pools, start)
    held_out = text_pages(8, 7, 480, 640)
    with torch.no_grad():
        prob = model(torch.from_numpy(held_out["image"]))[0].numpy()[:, 0]
    scores = pixel_scores(prob > 0.3, held_out["region"] > 0.5)
    print(
        f"trained {steps} steps in {time.perf_counter() - start:.0f}s; held-out 480x640 pixel F1 {scores['f1']:.3f} IoU {scores['iou']:.3f}"
    )
    DB_WEIGHTS.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), DB_WEIGHTS)
    export(model)


def train(model: TextDB, pools: list[dict], start: float) -> int:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=5e-3, total_steps=STEPS, pct_start=0.15)
    model.train()
    gen, step = torch.Generator().manual_seed(SEED), 0
    while step < STEPS:
        pool = pools[step % len(pools)]
        idx = torch.randint(len(pool["image"]), (BATCH,), generator=gen)
        flip = torch.rand(1, generator=gen).item() < 0.5  # brightness jitter: ink and paper vary
        image = pool["image"][idx] * (0.8 + 0.4 * torch.rand(BATCH, 1, 1, 1, generator=gen)) if flip else pool["image"][idx]
        loss = db_loss(model, image.clamp(0, 1), pool["region"][idx], pool["threshold"][idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        step += 1
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} ({time.perf_counter() - start:.0f}s)", flush=True)
    model.eval()
    return step


def db_loss(model: TextDB, image, region, threshold) -> torch.Tensor:
    prob, thresh, binary = (t[:, 0] for t in model.maps(image))
    bce = nn.functional.binary_cross_entropy(prob.clamp(1e-6, 1 - 1e-6), region, reduction="none")
    positive = region > 0.5
    negatives = bce[~positive]
    keep = min(int(negatives.numel()), max(3 * int(positive.sum()), 256))
    hard = negatives.topk(keep).values
    prob_loss = (bce[positive].sum() + hard.sum()) / (int(positive.sum()) + keep)
    band = threshold > THRESH_MIN + 1e-3
    thresh_loss = (thresh - threshold).abs()[band].mean() if band.any() else prob.sum() * 0
    dice = 1 - 2 * (binary * region).sum() / (binary.sum() + region.sum() + 1e-6)
    return prob_loss + 10 * thresh_loss + dice


def export(model: TextDB) -> None:
    """ONNX with batch, height and width dynamic (TorchScript exporter: Resize by scale, shapes from the input)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (torch.rand(1, 3, 256, 320),),
            str(DB_ONNX),
            dynamo=False,
            input_names=["image"],
            output_names=["prob", "binary"],
            dynamic_axes={n: {0: "batch", 2: "height", 3: "width"} for n in ("image", "prob", "binary")},
            opset_version=17,
            do_constant_folding=True,
        )


if __name__ == "__main__":
    main()
