"""Fuzzing edgekit's own parsers and the loaders' front doors with Hypothesis.

The property everywhere: a bad input gives an EdgekitError (the CLI's one clean line), never another
exception. `make test` runs a few dozen examples per target; `make fuzz` sets EDGEKIT_FUZZ_EXAMPLES
(and runs only this folder) for a longer search.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgekit.artifact import TensorSpec, parse_input_spec
from edgekit.errors import EdgekitError

EXAMPLES = int(os.environ.get("EDGEKIT_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=EXAMPLES <= 40)
SCRATCH = Path(tempfile.mkdtemp(prefix="edgekit-fuzz-"))
IMAGE = TensorSpec("image", ("batch", 3, 32, 32), "float32")

spec_text = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda name, dims, dtype: f"{name}:{'x'.join(dims)}{dtype}",
        st.text(st.characters(codec="ascii"), max_size=8),
        st.lists(st.one_of(st.integers(-3, 300).map(str), st.sampled_from(["batch", "a", "", "seq", "1e3", "N"])), max_size=5),
        st.sampled_from(["", ":float32", ":int64", ":nope", ":", ":uint8:x"]),
    ),
)


@FUZZ
@given(spec_text)
def test_input_specs_parse_or_give_a_clean_error(text):
    try:
        spec = parse_input_spec(text)
    except EdgekitError:
        return
    assert spec.name and all((isinstance(d, int) and d > 0) or (isinstance(d, str) and d.isidentifier()) for d in spec.shape)


target_text = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda rt, dev, opts: f"{rt}{dev}{opts}",
        st.sampled_from(["onnxruntime", "openvino", "litert", "torch", "tensorrt", "nope", ""]),
        st.sampled_from(["", ":cpu", ":cuda", ":npu", ":", "::"]),
        st.one_of(st.just(""), st.text(max_size=20).map(lambda t: f"[{t}]"), st.text(max_size=20).map(lambda t: f"[{t}")),
    ),
)


@FUZZ
@given(target_text)
def test_target_strings_parse_or_give_a_clean_error(text):
    from edgekit.targets import parse_target, runner_class

    try:
        runtime, device, options = parse_target(text)
        runner_class(runtime)
    except EdgekitError:
        return
    assert isinstance(options, dict) and device


preprocess_text = st.one_of(
    st.text(max_size=40),
    st.lists(
        st.tuples(
            st.sampled_from(["resize", "crop", "scale", "mean", "std", "order", "layout", "dtype", "channels", "bogus"]),
            st.one_of(st.text(max_size=8), st.sampled_from(["256", "224x224", "1/255", "0/0", "0.5/0.5/0.5", "nhwc", "x", "-1", "1/0"])),
        ),
        max_size=5,
    ).map(lambda pairs: ",".join(f"{k}={v}" for k, v in pairs)),
)


@FUZZ
@given(preprocess_text)
def test_preprocess_specs_parse_or_give_a_clean_error(text):
    from edgekit.calibration.preprocess import Preprocess

    if text and Path(text).exists():
        return  # a text that names a real file is read as one; not this test's subject
    try:
        Preprocess.parse(text, IMAGE)
    except EdgekitError:
        return


GOOD_RECIPE = """version: 1
model:
  path: model.onnx
calibration:
  path: calib.npz
  samples: 100
matrix:
  formats: [onnx, openvino]
  precisions: [fp32, int8]
latency:
  batch: 1
  runs: 10
gates:
  max_drop: 0.5
report:
  dir: out
"""


def _mutate(text: str, seed: int, edits: int) -> str:
    rng = random.Random(seed)
    chars = list(text)
    alphabet = ":-[]{}\n #'\"0123456789abcxyz\t!&*|>"
    for _ in range(edits):
        i = rng.randrange(len(chars) + 1)
        op = rng.randrange(3)
        if op == 0 and chars:
            del chars[min(i, len(chars) - 1)]
        elif op == 1:
            chars.insert(i, rng.choice(alphabet))
        elif chars:
            chars[min(i, len(chars) - 1)] = rng.choice(alphabet)
    return "".join(chars)


@FUZZ
@given(st.one_of(st.text(max_size=200), st.builds(_mutate, st.just(GOOD_RECIPE), st.integers(0, 2**32), st.integers(1, 12))))
def test_recipes_parse_or_give_a_clean_error(text):
    from edgekit.recipe.schema import load_recipe

    path = SCRATCH / "recipe.yaml"
    path.write_text(text)
    try:
        load_recipe(path)
    except EdgekitError:
        return


json_value = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
ROW_KEYS = [
    *("format", "precision", "target", "status", "accuracy", "drop_points", "top1_agreement", "cosine", "p50_ms", "times_ms"),
    *("task", "metric", "agreement", "agreement_metric"),
]
report_like = st.fixed_dictionaries(
    {
        "schema_version": st.sampled_from(["1.0", "1.1", "2.0", 1]),
        "kind": st.sampled_from(["matrix", "validate", None]),
        "rows": st.lists(st.dictionaries(st.sampled_from(ROW_KEYS), json_value, max_size=10), max_size=3) | json_value,
        "thresholds": st.dictionaries(st.sampled_from(["max_drop", "min_agreement", "min_cosine", "bogus"]), json_value, max_size=3)
        | json_value,
    }
)


@FUZZ
@given(st.one_of(report_like, json_value))
def test_report_json_is_read_and_gated_or_gives_a_clean_error(data):
    from edgekit.recipe.gating import LatencyCheck, regate
    from edgekit.report.schema import load_json

    path = SCRATCH / "report.json"
    path.write_text(json.dumps(data))
    try:
        regate(load_json(path), None, LatencyCheck(retime=False))
    except EdgekitError:
        return


@FUZZ
@given(json_value)
def test_reports_are_written_as_strict_json(data):
    from edgekit.report.schema import strict_json

    def refuse(constant):
        raise AssertionError(f"bare {constant} in a report")

    json.loads(strict_json({"value": data}), parse_constant=refuse)


def _tiny_onnx_bytes() -> bytes:
    from tests.corpus.make_corpus import _tiny_onnx

    path = SCRATCH / "seed.onnx"
    if not path.exists():
        _tiny_onnx(path)
    return path.read_bytes()


def _load_through_front_door(path: Path) -> None:
    from edgekit.provenance import DESCRIBERS, describe
    from edgekit.source import open_source

    source = open_source(str(path))
    if source.family in DESCRIBERS:
        describe(path, source.family, None)
    elif source.family == "torch":
        from edgekit.backends.torch.loader import load_torch

        load_torch(source)


SUFFIXES = [".onnx", ".pt2", ".xml", ".tflite", ".pt"]


@FUZZ
@given(st.sampled_from(SUFFIXES), st.one_of(st.binary(max_size=512), st.integers(0, 2**32)))
def test_loaders_refuse_random_and_mutated_bytes_cleanly(suffix, content):
    if isinstance(content, int):  # a real ONNX with a few bytes changed, under each suffix
        rng = random.Random(content)
        data = bytearray(_tiny_onnx_bytes())
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        content = bytes(data[: rng.randint(1, len(data))])
    path = SCRATCH / f"model{suffix}"
    path.write_bytes(content)
    try:
        _load_through_front_door(path)
    except EdgekitError:
        return


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_keras_front_door_refuses_random_bytes(suffix):
    """Keras is slow to import: a few fixed random files rather than a search."""
    for seed in range(3):
        path = SCRATCH / f"model{suffix}"
        path.write_bytes(random.Random(seed).randbytes(256 * (seed + 1)))
        with pytest.raises(EdgekitError):
            from edgekit.backends.keras.loader import KerasModel
            from edgekit.source import open_source

            KerasModel(open_source(str(path)))
