from pathlib import Path

import pytest

from edgekit.artifact import TensorSpec, parse_input_spec
from edgekit.errors import EdgekitError, InputMismatchError
from edgekit.fileio import atomic_output


def test_parse_input_spec_reads_name_shape_dtype():
    spec = parse_input_spec("image:1x3x224x224:float16")
    assert spec == TensorSpec("image", (1, 3, 224, 224), "float16")
    assert parse_input_spec("ids:batchx128:int64").shape == ("batch", 128)
    assert parse_input_spec("x:1x8").dtype == "float32"


@pytest.mark.parametrize("text", ["image", "image:", ":1x3", "a:1x2:notadtype"])
def test_parse_input_spec_rejects_malformed(text):
    with pytest.raises(InputMismatchError):
        parse_input_spec(text)


def test_concrete_shape_sets_batch_and_refuses_other_dynamic_dims():
    assert TensorSpec("x", ("batch", 3, 4)).concrete_shape(5) == (5, 3, 4)
    with pytest.raises(InputMismatchError, match="dynamic"):
        TensorSpec("x", ("batch", "seq")).concrete_shape(1)


def test_atomic_output_moves_main_and_side_files(tmp_path: Path):
    final = tmp_path / "out" / "model.onnx"
    with atomic_output(final) as tmp:
        assert tmp.name == "model.onnx" and tmp.parent != final.parent
        tmp.write_text("model")
        tmp.with_name("model.onnx.data").write_text("weights")
    assert final.read_text() == "model"
    assert (final.parent / "model.onnx.data").read_text() == "weights"
    assert sorted(p.name for p in final.parent.iterdir()) == ["model.onnx", "model.onnx.data"]


def test_atomic_output_keeps_the_good_file_when_writing_fails(tmp_path: Path):
    final = tmp_path / "model.onnx"
    final.write_text("good")
    with pytest.raises(RuntimeError):
        with atomic_output(final) as tmp:
            tmp.write_text("half-writ")
            raise RuntimeError("exporter crashed")
    assert final.read_text() == "good"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_error_folds_whitespace_and_puts_the_hint_on_its_own_line():
    err = EdgekitError("bad\n  thing", hint="do\n this")
    assert err.lines() == ["error: bad thing", "hint: do this"]
    assert err.one_line() == "bad thing; hint: do this"  # a row's status in a report table
    assert EdgekitError("no hint").lines() == ["error: no hint"]
