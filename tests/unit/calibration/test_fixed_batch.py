"""Fixed batch shapes: a model whose batch is fixed (at 1 or at N) is fed batches of exactly that size, the last one
filled up with repeated samples whose outputs are dropped; a dynamic batch keeps the sizes asked for."""

import numpy as np
import pytest

from edgekit.artifact import TensorSpec, fixed_batch, parse_input_spec
from edgekit.calibration import Samples
from edgekit.calibration.samples import unpadded


def _samples(count: int) -> Samples:
    image = np.arange(count, dtype=np.float32).reshape(count, 1, 1, 1)  # sample i holds the value i
    return Samples({"image": image}, np.arange(count) % 3).bind([TensorSpec("image", ("batch", 1, 1, 1))])


def _values(feeds) -> list[float]:
    return feeds["image"].reshape(-1).tolist()


def test_the_fixed_batch_is_the_static_size_of_the_first_data_inputs_batch_axis():
    assert fixed_batch([TensorSpec("image", (4, 3, 32, 32))]) == 4
    assert fixed_batch([TensorSpec("image", (1, 3, 32, 32))]) == 1
    assert fixed_batch([TensorSpec("image", ("batch", 3, 32, 32))]) is None
    assert fixed_batch([parse_input_spec("state:2xbatchx64")]) is None  # its batch is on axis 1, dynamic
    assert fixed_batch([parse_input_spec("sr=16000:int64"), TensorSpec("x", (2, 8))]) == 2  # constants aside
    assert fixed_batch([]) is None


def test_an_image_fixed_at_batch_1_with_dynamic_height_and_width_has_its_batch_on_axis_0():
    image = TensorSpec("image", (1, 3, "height", "width"))
    assert image.batch_axis() == 0 and image.fixed_batch() == 1
    assert image.to_model_layout(np.zeros((5, 3, 20, 30))).shape == (5, 3, 20, 30)  # H and W come from the data
    assert TensorSpec("state", (2, None, 128)).batch_axis() == 1  # one dynamic dim after a fixed one: a recurrent state
    Samples({"image": np.zeros((2, 3, 20, 30), np.float32)}).bind([image])  # the data fits: no error


def test_a_fixed_batch_is_filled_up_with_repeated_samples_and_says_how_many_are_real():
    batches = list(_samples(10).counted_batches(64, fixed=4))
    assert [_values(f) for f, _ in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 8, 9]]
    assert [real for _, real in batches] == [4, 4, 2]
    assert [_values(f) for f in _samples(3).batches(64, fixed=4)] == [[0, 1, 2, 0]]  # fewer samples than the batch
    assert [_values(f) for f in _samples(3).batches(64, fixed=1)] == [[0], [1], [2]]


def test_a_dynamic_batch_keeps_the_sizes_asked_for():
    assert [_values(f) for f in _samples(5).batches(2)] == [[0, 1], [2, 3], [4]]
    assert [real for _, real in _samples(5).counted_batches(2, fixed=None)] == [2, 2, 1]


def test_what_the_repeated_samples_give_is_dropped():
    logits, scalar = np.arange(8).reshape(4, 2), np.float32(3)
    kept = unpadded([logits, scalar], 4, 2)
    assert kept[0].tolist() == [[0, 1], [2, 3]] and kept[1] == scalar
    assert unpadded([logits], None, 2)[0] is logits and unpadded([logits], 4, 4)[0] is logits


def test_a_subset_keeps_labels_ids_and_the_bound_specs():
    samples = _samples(6)
    samples.ids = [f"s{i}" for i in range(6)]
    head, picked = samples.head(2), samples.subset(np.array([True, False, True, False, False, True]))
    assert _values(next(head.batches(8))) == [0, 1] and head.labels.tolist() == [0, 1] and head.specs == samples.specs
    assert picked.ids == ["s0", "s2", "s5"] and picked.labels.tolist() == [0, 2, 2]


def test_nncf_accuracy_control_gets_fixed_batches_with_the_labels_of_the_real_samples():
    ov = pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from openvino import opset13

    from edgekit.backends.openvino.calibration import nncf_dataset, nncf_validation

    def model(batch: int):
        image = opset13.parameter([batch, 1, 1, 1], ov.Type.f32, name="image")
        image.output(0).get_tensor().set_names({"image"})
        return ov.Model([opset13.relu(image)], [image])

    sets = np.zeros((7, 10), bool)
    sets[[0, 3, 4, 6], 4] = True  # 4 of 7 samples carry a label
    samples = Samples({"image": np.arange(7, dtype=np.float32).reshape(7, 1, 1, 1)}, sets)
    samples = samples.bind([TensorSpec("image", ("batch", 1, 1, 1))])
    fixed = list(nncf_validation(samples, model(3)).get_data())
    assert [_values(feeds) for feeds, _, _ in fixed] == [[0, 3, 4], [6, 6, 6]]
    assert [labels.shape for _, labels, _ in fixed] == [(3, 10), (1, 10)] and {size for *_, size in fixed} == {3}
    single = list(nncf_validation(samples, model(-1)).get_data())
    assert [_values(feeds) for feeds, _, _ in single] == [[0], [3], [4], [6]]
    assert [_values(f) for f in nncf_dataset(samples, model(3)).get_data()] == [[0, 1, 2], [3, 4, 5], [6, 6, 6]]
