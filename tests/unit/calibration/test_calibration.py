import json

import numpy as np
import pytest
from PIL import Image

from edgekit.artifact import TensorSpec
from edgekit.calibration import load_samples, random_samples
from edgekit.calibration.preprocess import Preprocess
from edgekit.errors import EdgekitError, InputMismatchError

SPEC = [TensorSpec("image", ("batch", 1, 28, 28), "float32")]
RGB = [TensorSpec("x", (1, 3, 32, 32), "float32")]


def test_npz_sampling_is_deterministic_and_keeps_labels(small_test_npz):
    a = load_samples(str(small_test_npz), 100, seed=3, specs=SPEC)
    b = load_samples(str(small_test_npz), 100, seed=3, specs=SPEC)
    c = load_samples(str(small_test_npz), 100, seed=4, specs=SPEC)
    assert len(a) == 100 and a.labels.shape == (100,)
    assert a.provenance["sha256"] == b.provenance["sha256"] != c.provenance["sha256"]
    np.testing.assert_array_equal(a.arrays["image"], b.arrays["image"])


def test_labels_are_a_class_each_or_label_sets(tmp_path):
    image = np.zeros((4, 1, 28, 28), np.float32)
    np.savez(tmp_path / "column.npz", image=image, labels=np.array([[3], [1], [0], [9]], np.uint8))
    column = load_samples(str(tmp_path / "column.npz"), specs=SPEC).labels
    assert column.dtype == np.int64 and column.tolist() == [3, 1, 0, 9]
    sets = np.zeros((4, 10), np.uint8)
    sets[0, [2, 5]] = sets[1, 7] = 1  # ImageNet-ReaL-style: several classes right, or none (left out of accuracy)
    np.savez(tmp_path / "sets.npz", image=image, labels=sets)
    loaded = load_samples(str(tmp_path / "sets.npz"), specs=SPEC).labels
    assert loaded.dtype == bool and loaded.sum(1).tolist() == [2, 1, 0, 0]
    for name, labels in (("cube", np.ones((4, 3, 2))), ("counts", sets * 2), ("none", np.zeros((4, 10)))):
        np.savez(tmp_path / f"{name}.npz", image=image, labels=labels)
        with pytest.raises(InputMismatchError, match=f"labels in {name}.npz have shape"):
            load_samples(str(tmp_path / f"{name}.npz"), specs=SPEC)


def test_nncf_accuracy_control_sees_the_samples_that_carry_a_label():
    ov = pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from openvino import opset13

    from edgekit.backends.openvino.calibration import nncf_validation
    from edgekit.calibration import Samples

    sets = np.zeros((5, 10), bool)
    sets[[0, 3], 4] = True
    image = np.arange(5, dtype=np.float32).reshape(5, 1, 1, 1)  # sample i holds the value i
    samples = Samples({"image": image}, sets).bind([TensorSpec("image", ("batch", 1, 1, 1), "float32")])
    parameter = opset13.parameter([-1, 1, 1, 1], ov.Type.f32, name="image")  # a model that takes any batch
    parameter.output(0).get_tensor().set_names({"image"})
    items = list(nncf_validation(samples, ov.Model([opset13.relu(parameter)], [parameter])).get_data())
    assert [float(feeds["image"][0, 0, 0, 0]) for feeds, _, _ in items] == [0.0, 3.0] and items[0][1].shape == (1, 10)


def test_wrong_shape_and_dtype_name_the_input(tmp_path):
    np.savez(tmp_path / "bad.npz", image=np.zeros((4, 3, 28, 28), np.float32))
    with pytest.raises(InputMismatchError, match="input 'image': data shape 4x3x28x28"):
        load_samples(str(tmp_path / "bad.npz"), specs=SPEC)
    np.savez(tmp_path / "f64.npz", image=np.zeros((4, 1, 28, 28)))
    with pytest.raises(InputMismatchError, match="input 'image': data dtype float64"):
        load_samples(str(tmp_path / "f64.npz"), specs=SPEC)
    np.savez(tmp_path / "names.npz", a=np.zeros((4, 1, 28, 28), np.float32), b=np.zeros((4, 2), np.float32))
    with pytest.raises(InputMismatchError, match=r"no array for input\(s\) \['image'\]"):
        load_samples(str(tmp_path / "names.npz"), specs=SPEC)


def test_npy_binds_to_a_single_input(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((5, 1, 28, 28), np.float32))
    samples = load_samples(str(tmp_path / "x.npy"), specs=SPEC)
    assert list(samples.arrays) == ["image"] and samples.labels is None


def _write_images(folder, classes=("cat", "dog"), per_class=3, size=(40, 50)):
    rng = np.random.default_rng(0)
    for cls in classes:
        (folder / cls).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8)).save(folder / cls / f"{i}.png")


def test_image_folder_gives_labels_from_subfolders_and_preprocesses(tmp_path):
    _write_images(tmp_path / "imgs")
    samples = load_samples(str(tmp_path / "imgs"), specs=RGB, preprocess="mean=0.5/0.5/0.5,std=0.5/0.5/0.5")
    assert samples.arrays["x"].shape == (6, 3, 32, 32) and samples.arrays["x"].dtype == np.float32
    assert sorted(samples.labels.tolist()) == [0, 0, 0, 1, 1, 1]
    assert samples.arrays["x"].min() >= -1.0 and samples.arrays["x"].max() <= 1.0
    assert samples.provenance["classes"] == ["cat", "dog"]


def _write_shades(folder, count=6):
    """A flat folder of one-colour images, image i of shade 10 * i, named so that sorted order is i's."""
    folder.mkdir()
    for i in range(count):
        Image.fromarray(np.full((32, 32, 3), 10 * i, np.uint8)).save(folder / f"img_{i:02d}.png")
    return [f"img_{i:02d}.png" for i in range(count)]


def _shades(samples) -> list[int]:
    return np.rint(samples.arrays["x"][:, 0, 0, 0] * 255 / 10).astype(int).tolist()


def test_labels_json_labels_a_folder_by_path_or_in_sorted_order(tmp_path):
    names = _write_shades(tmp_path / "flat")
    labels = tmp_path / "flat" / "labels.json"
    labels.write_text(json.dumps({name: 9 - i for i, name in enumerate(reversed(names))}))  # image i: class 4 + i
    chosen = load_samples(str(tmp_path / "flat"), 3, seed=1, specs=RGB)
    assert chosen.labels.dtype == np.int64 and chosen.labels.tolist() == [4 + i for i in _shades(chosen)]
    assert chosen.provenance["labels"] == "labels.json"
    labels.write_text(json.dumps([[2, 7], 3, [], [1, 1], [0], [5, 2]]))  # ImageNet-ReaL's real.json: a list in sorted order
    sets = load_samples(str(tmp_path / "flat"), specs=RGB).labels
    assert sets.dtype == bool and sets.shape == (6, 8)
    assert [np.flatnonzero(row).tolist() for row in sets] == [[2, 7], [3], [], [1], [0], [2, 5]]
    (tmp_path / "flat" / "shoes").mkdir()  # a labels.json outranks class subfolders
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "flat" / "shoes" / "a.png")
    labels.write_text(json.dumps({**{name: 1 for name in names}, "shoes/a.png": [4, 6]}))
    assert load_samples(str(tmp_path / "flat"), specs=RGB).labels.shape == (7, 7)
    labels.write_text(json.dumps([[0], [], [0], [0], [0], [0], [0]]))  # class 0 or none: sets one class wide, not classes
    assert load_samples(str(tmp_path / "flat"), specs=RGB).labels.tolist() == [[True], [False], *[[True]] * 5]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "cannot read .*labels.json"),
        ('{"img_00.png": 1}', "labels.json gives no label for 5 of the 6 images \\(the first: img_01.png\\)"),
        ("[1, 2, 3]", "labels.json holds 3 entries for the folder's 6 images"),
        ('"cat"', "labels.json holds a JSON str for the folder's 6 images"),
        ('[0, 1, 2, "cat", 4, 5]', 'the label of img_03.png in .*labels.json is "cat": neither a class index nor a list of them'),
        ("[0, 1, 2, [3, -1], 4, 5]", "the label of img_03.png in .*labels.json is \\[3, -1\\]"),
        ("[[], [], [], [], [], []]", "labels.json names no class for any image"),
    ],
)
def test_a_bad_labels_json_is_one_error(tmp_path, content, message):
    _write_shades(tmp_path / "flat")
    (tmp_path / "flat" / "labels.json").write_text(content)
    with pytest.raises(EdgekitError, match=message):
        load_samples(str(tmp_path / "flat"), specs=RGB)


def test_preprocess_resize_crop_layout_order():
    img = Image.fromarray(np.tile(np.array([255, 0, 0], np.uint8), (60, 80, 1)))
    nhwc = Preprocess.parse("layout=nhwc,order=bgr,scale=1", TensorSpec("x", (1, 24, 24, 3)))
    out = nhwc.apply(img)
    assert out.shape == (24, 24, 3) and out[0, 0].tolist() == [0.0, 0.0, 255.0]
    with pytest.raises(EdgekitError, match="unknown preprocessing key"):
        Preprocess.parse("size=3", RGB[0])


def test_empty_folder_and_unreadable_image(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(EdgekitError, match="no images"):
        load_samples(str(tmp_path / "empty"), specs=RGB)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a.jpg").write_bytes(b"not an image")
    with pytest.raises(EdgekitError, match="cannot read image"):
        load_samples(str(tmp_path / "broken"), specs=RGB)


def test_callable_source_yields_samples_or_batches(tmp_path, monkeypatch):
    (tmp_path / "calib_src.py").write_text(
        "import numpy as np\n"
        "def per_sample():\n    return (np.full((1, 28, 28), i, np.float32) for i in range(10))\n"
        "def batched():\n    return [{'image': np.zeros((4, 1, 28, 28), np.float32), 'labels': np.arange(4)}] * 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    first = load_samples("calib_src:per_sample", 6, specs=SPEC)
    assert len(first) == 6 and first.arrays["image"][5, 0, 0, 0] == 5
    batched = load_samples("calib_src:batched", specs=SPEC)
    assert len(batched) == 12 and batched.labels.tolist()[:4] == [0, 1, 2, 3]


def test_random_samples_are_marked():
    samples = random_samples(SPEC, 8)
    assert samples.provenance["random"] is True and samples.arrays["image"].shape == (8, 1, 28, 28)
