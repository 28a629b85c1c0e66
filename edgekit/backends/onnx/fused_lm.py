"""A causal language model in the graph ONNX Runtime runs language models fastest in, its KV cache held in place.

The graph is onnxruntime-genai's model builder's (`python -m onnxruntime_genai.models.builder -p fp32 -e cpu`, run on
the transformers model saved as a folder, in a process of its own): GroupQueryAttention with the rotary embedding
inside, RMSNorm fused with the residual add, one MatMul for q, k and v, one for gate and up. It takes `input_ids`, an
`attention_mask` whose length is the tokens held, `logits_from` (edgekit's: the first position whose logits it gives)
and each layer's `past_key_values.N.key/value`; it gives `logits` and each layer's `present.N.key/value`. Architectures the builder does not take, and machines
without onnxruntime-genai, keep torch.onnx's export (backends.onnx.causal_lm), whose cache goes in and out whole.

It runs on plain ONNX Runtime (onnxruntime-genai is needed only to convert). One buffer per layer's keys and values,
[1, kv_heads, capacity, head_dim], is bound with I/O binding as both the past input and the present output:
GroupQueryAttention writes the new tokens' keys and values in place (past_present_share_buffer) and reads the mask's
length for how many are held, so nothing of the cache is copied at a step. SmolLM2-135M's default int4 at 2 threads
decodes 175 tokens/s this way, 73 in the stateless graph (docs/language-models.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from edgekit.artifact import held_step
from edgekit.backends.onnx.nbits import PROTOBUF_LIMIT, save_onnx
from edgekit.errors import EdgekitError

BUILDER = "onnxruntime_genai.models.builder"
PAST, PRESENT = "past_key_values.{}.{}", "present.{}.{}"
GEOMETRY = "edgekit.kv_cache"  # the graph's metadata key: {"layers", "kv_heads", "head_dim"}
LOGITS_FROM = "logits_from"  # the graph's input: the first position whose logits it gives (0 all, -1 the last)
GROWTH = 256  # the cache's buffers grow in steps of this many tokens
NBITS_OPSET = 20  # NNCF writes int4 as MatMulNBits below opset 21 (DequantizeLinear with blocks from 21)
LAYOUT = "fused: GroupQueryAttention, fused RMSNorm and projections (onnxruntime-genai's model builder)"
HELD = "in ONNX Runtime buffers bound as both past and present (GroupQueryAttention writes in place)"


def is_fused(input_names) -> bool:
    return PAST.format(0, "key") in set(input_names)


def export(model, shape, out: Path, work: Path) -> str | None:
    """`model` (a transformers causal LM) in fp32 as the builder's graph, written to `out` (weights beside it past
    2 GB). None when written; else why not (the builder is not installed, or refuses the architecture)."""
    import onnx

    from edgekit.backends.torch.causal_lm import save_folder

    folder, built = work / "hf", work / "fused"
    save_folder(model, folder)
    command = [sys.executable, "-m", BUILDER, "-i", str(folder), "-o", str(built), "-p", "fp32", "-e", "cpu"]
    command += ["-c", str(work / "builder-cache"), "--extra_options", f"filename={out.name}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return _builder_failure(done.stderr)
    data = built / (out.name + ".data")
    inline = not data.exists() or data.stat().st_size <= PROTOBUF_LIMIT  # a small model's weights go back inside the file
    graph = _head_reads_kept_positions(onnx.load(str(built / out.name), load_external_data=inline))
    geometry = {"layers": shape.layers, "kv_heads": shape.kv_heads, "head_dim": shape.head_dim}
    onnx.helper.set_model_props(graph, {GEOMETRY: json.dumps(geometry)})
    if inline:
        save_onnx(graph, out)
    else:  # the graph edited alone; the builder's weights moved beside it, not read and written again
        onnx.save(graph, str(out))
        data.replace(out.with_name(data.name))
    return None


def _head_reads_kept_positions(model):
    """A Slice before the head, from the position the `logits_from` input names (0: every position's logits, what
    perplexity reads; -1: the last one's, what generation reads). The head is a fifth of SmolLM2-135M's weights: a
    128-token prompt's time to first token went from 95-100 to 81-82 ms (int4, 2 threads)."""
    from onnx import TensorProto, helper, numpy_helper

    head = next(n for n in model.graph.node if "logits" in n.output)
    hidden = head.input[0]
    model.graph.initializer.extend(
        [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("logits_to", [2**62]), ("logits_axis", [1]))]
    )
    model.graph.input.append(helper.make_tensor_value_info(LOGITS_FROM, TensorProto.INT64, [1]))
    kept = helper.make_node("Slice", [hidden, LOGITS_FROM, "logits_to", "logits_axis"], [hidden + "_kept"], name="/lm_head/kept_positions")
    head.input[0] = kept.output[0]
    model.graph.node.insert(list(model.graph.node).index(head), kept)
    return model


def _builder_failure(stderr: str) -> str:
    """Why the builder's process failed, in one line: its exception's, else its last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    if any("No module named" in line and "onnxruntime_genai" in line for line in lines):
        return "onnxruntime-genai is not installed (pip install onnxruntime-genai)"
    raised = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    return f"onnxruntime-genai's model builder refused it: {(raised or lines or ['no output'])[-1][:200]}"


def prefill_feed(shape):
    """Calibration feeds for NNCF: a token row [T] read from an empty cache."""

    def feed(row: np.ndarray) -> dict:
        empty = np.zeros((1, shape.kv_heads, 0, shape.head_dim), np.float32)
        cache = {PAST.format(i, kind): empty for i in range(shape.layers) for kind in ("key", "value")}
        tokens = {"input_ids": row[None], "attention_mask": np.ones((1, len(row)), np.int64), LOGITS_FROM: np.zeros(1, np.int64)}
        return tokens | cache

    return feed


def nbits_opset(model):
    """The default domain's opset lowered to NBITS_OPSET, so NNCF writes MatMulNBits (ONNX Runtime's int4 kernel):
    the builder's graph declares 21+ and uses no op whose meaning changed since."""
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            opset.version = min(opset.version, NBITS_OPSET)
    return model


class FusedOnnxLM:
    """ONNX Runtime stepping the builder's graph with the cache in place.

    Like OpenVINO's stateful session, step() takes and gives back zero-byte stand-ins of the cache's shape (their
    length axis counts the tokens held); a past of 0 starts afresh (the mask's length hides what an earlier sequence
    left). The buffers grow by GROWTH tokens when a step needs more (the held tokens copied once); `cache_tokens` is
    what they hold allocated."""

    name = "onnxruntime:cpu"

    def __init__(self, session) -> None:
        import onnxruntime as ort

        self.ort, self.session = ort, session
        geometry = json.loads(session.get_modelmeta().custom_metadata_map.get(GEOMETRY, "null") or "null")
        if geometry is None:
            raise EdgekitError("the ONNX language model does not record its cache's geometry", hint="convert it again with this edgekit")
        self.layers, self.kv_heads, self.head_dim = geometry["layers"], geometry["kv_heads"], geometry["head_dim"]
        self.binding = session.io_binding()
        self.arrays: dict[str, np.ndarray] = {}  # the buffers' memory: ONNX Runtime's values wrap it, not copy it
        self.cache_tokens = 0
        self._grow(GROWTH)
        self.binding.bind_output("logits", "cpu")
        self.logits_at = len(self.arrays)  # outputs come back in the order they were bound

    def step(self, ids, keys, values):
        return self._run(ids, keys, 0)

    def step_last(self, ids, keys, values):
        """step() giving the last position's logits only (a prompt read for generation: the head runs once)."""
        return self._run(ids, keys, -1)

    def _run(self, ids, keys, logits_from: int):
        past = keys.shape[3]
        if past + ids.shape[1] > self.cache_tokens:
            self._grow(-(-(past + ids.shape[1]) // GROWTH) * GROWTH, keep=past)
        self.binding.bind_cpu_input("input_ids", np.ascontiguousarray(ids, np.int64))
        self.binding.bind_cpu_input("attention_mask", np.ones((1, past + ids.shape[1]), np.int64))
        self.binding.bind_cpu_input(LOGITS_FROM, np.array([logits_from], np.int64))
        self.binding.bind_output("logits", "cpu")
        self.session.run_with_iobinding(self.binding)
        logits = self.binding.get_outputs()[self.logits_at].numpy()
        return held_step(logits, keys, past + ids.shape[1])

    def _grow(self, tokens: int, keep: int = 0) -> None:
        """Buffers of `tokens` tokens, the first `keep` carried over, bound as each layer's past and present."""
        for layer in range(self.layers):
            for kind in ("key", "value"):
                name = PAST.format(layer, kind)
                array = np.zeros((1, self.kv_heads, tokens, self.head_dim), np.float32)
                if keep:
                    array[:, :, :keep] = self.arrays[name][:, :, :keep]
                self.arrays[name] = array
                value = self.ort.OrtValue.ortvalue_from_numpy(array)
                self.binding.bind_ortvalue_input(name, value)
                self.binding.bind_ortvalue_output(PRESENT.format(layer, kind), value)
        self.cache_tokens = tokens
