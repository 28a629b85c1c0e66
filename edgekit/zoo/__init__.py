"""Real models edgekit ships for its demo, tests and benchmarks.

`fashion_cnn` is trained on Fashion-MNIST by `scripts/train_fashion_cnn.py`; its weights and a
calibration/test split of the real data are committed under `edgekit/zoo/data/`.
`resnet18_shape` is a ResNet-18-shaped CNN used for latency work only (its weights are not trained).
"""
