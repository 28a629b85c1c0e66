"""A language model past the 2 GB a protobuf holds (a 0.5B model is 2.5 GB in fp32) converts to ONNX with its
weights as external data beside it, and validate reads it back: a seeded random Llama of 2.3 GB (tests.lm_files)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import edgekit

pytest.importorskip("onnxruntime")


@pytest.fixture
def built_once():
    """The 2.3 GB model's build is kept for the test only (tests.lm_files.large_random_lm), then freed."""
    from tests.lm_files import large_random_lm

    yield
    large_random_lm.cache_clear()


def test_a_model_over_2_gb_round_trips_through_onnx_as_external_data(tmp_path, built_once):
    out = tmp_path / "large.onnx"
    converted = edgekit.convert("tests.lm_files:large_random_lm", to="onnx", output=str(out), task="text-generation", max_seq_len=32)
    data = out.with_name("large.onnx.data")
    assert out.stat().st_size < 2**20 and data.stat().st_size > 2**31  # the graph in the file, the weights beside it
    assert data.stat().st_size < 1.1 * 270_000 * 2048 * 4  # the tied head reads the embedding: not stored a second time
    assert converted.size_bytes >= data.stat().st_size  # counted with its side file
    provenance = json.loads(out.with_name("large.onnx.edgekit.json").read_text())
    assert provenance["verified"]["greedy_match"] == 1.0 and "large.onnx.data" in provenance["files"]
    ids = np.random.default_rng(0).integers(1, 270_000, (2, 24))
    np.savez(tmp_path / "tokens.npz", input_ids=ids)
    report = edgekit.validate(str(out), data=str(tmp_path / "tokens.npz"), runs=1, warmup=0, prompt_len=8, new_tokens=4)
    assert report.language["ppl_ratio"] == pytest.approx(1.0, abs=1e-4) and report.language["greedy_match"] == 1.0
