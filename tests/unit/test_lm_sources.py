"""Language models as users hold them: a transformers save_pretrained folder and a GGUF file (the zoo's stdlib-lm,
trained here, written in both forms by tests/lm_files.py), converted without --task, read with their own tokenizer,
and timed with the peak memory of the artifact's own run."""

from __future__ import annotations

import json

import numpy as np
import pytest

import edgekit
from tests.conftest import assert_clean_error, run_cli
from tests.lm_files import write_gguf, write_pretrained_folder

pytest.importorskip("onnxruntime")
pytest.importorskip("gguf")
MAX_SEQ = "160"  # text is read in 128-token sequences


@pytest.fixture(scope="module")
def folder_onnx(tmp_path_factory):
    """zoo:stdlib-lm as a save_pretrained folder, converted to fp32 ONNX by the command line (no --task): the result
    and the artifact's path."""
    work = tmp_path_factory.mktemp("pretrained")
    folder = write_pretrained_folder(work / "stdlib-lm")
    out = work / "lm.onnx"
    return run_cli("convert", folder, "--to", "onnx", "--max-seq-len", MAX_SEQ, "-o", out), out


def _provenance(path) -> dict:
    return json.loads(path.with_name(path.name + ".edgekit.json").read_text())


def test_a_save_pretrained_folder_converts_and_reads_text_with_its_own_tokenizer(folder_onnx, tmp_path):
    result, out = folder_onnx
    assert result.code == 0, result.stdout + result.stderr
    provenance = _provenance(out)
    assert provenance["task"] == "text-generation" and provenance["source"]["format"] == "transformers"
    assert provenance["verified"]["greedy_match"] == 1.0  # fp32 decodes what PyTorch decodes
    assert out.with_name("lm.onnx.tokenizer.json").is_file()  # the folder's tokenizer ships beside the artifact
    report = edgekit.validate(str(out), data="zoo:stdlib-lm-text", limit=3, runs=1, warmup=0, new_tokens=4, prompt_len=8)
    assert report.data["read_as"] == "text cut into 128-token sequences"
    assert report.language["ppl_ratio"] == pytest.approx(1.0, abs=1e-5) and report.language["greedy_match"] == 1.0


def test_peak_rss_is_the_artifacts_own_run_not_the_calling_process(folder_onnx):
    """The caller holds 1.5 GB; the artifact's timing runs in a fresh process whose own peak is what is reported
    (getrusage's ru_maxrss would carry the caller's 1.5 GB into it)."""
    _, out = folder_onnx
    ballast = np.ones(1536 * 2**20 // 8)  # touched: resident
    report = edgekit.validate(str(out), data="zoo:stdlib-lm-test", limit=1, runs=1, warmup=0, new_tokens=2, prompt_len=4)
    assert 0 < report.latency.peak_rss_mb < 1000, report.latency.peak_rss_mb
    assert ballast.sum() > 0


@pytest.mark.parametrize("quantization", ["Q4_1"])
def test_a_gguf_file_is_dequantized_into_the_reference_and_its_quantization_recorded(tmp_path, quantization):
    path = write_gguf(tmp_path / f"lm.{quantization}.gguf", quantization)
    out = tmp_path / "lm.onnx"
    result = run_cli("convert", path, "--to", "onnx", "--max-seq-len", MAX_SEQ, "-o", out)
    assert result.code == 0, result.stdout + result.stderr
    provenance = _provenance(out)
    assert provenance["source"]["format"] == "gguf" and provenance["task"] == "text-generation"
    assert provenance["source"]["gguf"]["file_type"] == quantization
    assert provenance["source"]["gguf"]["tensor_types"][quantization] == 4 * 7 + 1  # every projection and the embedding
    assert provenance["verified"]["greedy_match"] == 1.0  # exact against the dequantized weights it was made from
    assert out.with_name("lm.onnx.tokenizer.json").is_file()  # the GGUF's own vocabulary and merges


def test_a_broken_gguf_or_folder_gets_one_clear_line(tmp_path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"GGUF" + bytes(range(256)) * 8)
    assert_clean_error(run_cli("convert", bogus, "--to", "onnx", "-o", tmp_path / "a.onnx"), "model.gguf")
    folder = tmp_path / "pretrained"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    assert_clean_error(run_cli("convert", folder, "--to", "onnx", "-o", tmp_path / "b.onnx"), "pretrained")
    assert not list(tmp_path.glob("*.onnx*"))
