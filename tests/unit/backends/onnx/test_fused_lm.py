"""Why convert fell back to torch.onnx's graph, said in one line from the builder's own error (its process's stderr)."""

from __future__ import annotations

from edgekit.backends.onnx.fused_lm import _builder_failure


def test_the_builders_refusal_is_its_exception_line_and_a_missing_package_is_named():
    traceback = "Valid precision ...\nTraceback (most recent call last):\n  File \"x\", line 1\nKeyError: 'multi_cache'\n"
    assert _builder_failure(traceback).endswith("refused it: KeyError: 'multi_cache'")
    refused = "NotImplementedError: The GPT2LMHeadModel model is not currently supported.\n"
    assert "GPT2LMHeadModel model is not currently supported" in _builder_failure(refused)
    missing = "/usr/bin/python: Error while finding module specification (ModuleNotFoundError: No module named 'onnxruntime_genai')"
    assert _builder_failure(missing) == "onnxruntime-genai is not installed (pip install onnxruntime-genai)"
    assert _builder_failure("") == "onnxruntime-genai's model builder refused it: no output"
