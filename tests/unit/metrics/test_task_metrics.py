"""Task metrics on known cases: decoders, COCO mAP (pycocotools), maps binarized image by image, neighbours kept.

The arrays here are made to known answers (the metric is the thing tested); tests/unit/validation/test_task_validation.py
judges real trained models with them.
"""

import json

import numpy as np
import pytest

from edgekit.calibration.task_labels import BoxLabels, read_box_labels
from edgekit.errors import EdgekitError
from edgekit.metrics.detection import coco_score, decode, detection_scores, detector_layout, raw_heads
from edgekit.metrics.embedding import embedding_scores
from edgekit.metrics.maps import class_map_scores, probability_map_scores
from edgekit.metrics.task import resolve_task

RNG = np.random.default_rng(0)


def _yolov8(count: int = 40, anchors: int = 200, classes: int = 5, seed: int = 0):
    """[N, 4+C, A] with 1-3 objects per image (a box at a chosen anchor, a high class probability) among low scores."""
    rng = np.random.default_rng(seed)
    out = np.zeros((count, 4 + classes, anchors), np.float32)
    out[:, :2] = rng.uniform(20, 70, (count, 2, anchors))
    out[:, 2:4] = rng.uniform(4, 12, (count, 2, anchors))  # small boxes: few overlap
    out[:, 4:] = rng.uniform(0, 0.02, (count, classes, anchors))
    truth = []
    for i in range(count):
        k = int(rng.integers(1, 4))
        idx, cls = rng.choice(anchors, k, replace=False), rng.integers(0, classes, k)
        out[i, 2:4, idx] = 20.0
        out[i, 0, idx], out[i, 1, idx] = np.arange(k) * 30 + 15, 50.0  # apart from each other
        out[i, 4 + cls, idx] = rng.uniform(0.6, 0.95, k)
        cx, cy = out[i, 0, idx], out[i, 1, idx]
        truth.append({"boxes": np.stack([cx - 10, cy - 10, cx + 10, cy + 10], 1).astype(float), "classes": cls, "crowd": np.zeros(k, bool)})
    return out, truth


def test_decoders_read_the_layouts_users_export():
    out, truth = _yolov8()
    assert detector_layout({"output0": out}) == "yolov8"
    assert detector_layout({"output0": out.transpose(0, 2, 1)[..., :4].repeat(1, 0)}) is None  # boxes alone: nothing to score
    v5 = np.concatenate([out[:, :4], np.ones_like(out[:, :1]), out[:, 4:]], 1).transpose(0, 2, 1)
    assert detector_layout({"output0": v5}) == "yolov5"
    for layout, outputs in (("yolov8", {"y": out}), ("yolov5", {"y": v5})):
        decoded = decode(outputs, None, (96, 96))
        assert decoded.how == layout
        first = decoded.detections[0]
        assert sorted(first["classes"][first["scores"] > 0.5]) == sorted(truth[0]["classes"])
    finished = np.zeros((2, 10, 6), np.float32)
    finished[:, 0] = [10, 10, 30, 30, 0.9, 3]
    assert detector_layout({"dets": finished}) == "detections"
    named = {"boxes": finished[..., :4], "scores": finished[..., 4], "labels": finished[..., 5]}
    assert detector_layout(named) == "detections"
    (one, _) = decode(named, None, None).detections
    assert one["classes"].tolist() == [3] and one["boxes"].tolist() == [[10, 10, 30, 30]]


def test_hidden_states_are_not_read_as_boxes_and_raw_heads_say_what_to_pass():
    hidden = RNG.normal(size=(4, 16, 64)).astype(np.float32)  # a transformer's [N, T, D]: negative values
    assert detector_layout({"last_hidden_state": hidden}) is None
    assert resolve_task(None, [hidden], ["y"], None).name == "embedding"
    heads = [RNG.random((1, 300, 10)), RNG.random((1, 300, 32)), RNG.random((1, 75, 10)), RNG.random((1, 75, 32))]
    names = ["cls_8", "box_8", "cls_16", "box_16"]
    assert raw_heads(dict(zip(names, heads, strict=True)))
    task = resolve_task(None, heads, names, None)
    assert task.name == "detection" and "--postprocess module:function" in task.why
    with pytest.raises(EdgekitError, match="cannot read these outputs as detections"):
        decode(dict(zip(names, heads, strict=True)), None, None)


def test_picodet_raw_heads_are_read_as_their_package_decodes_them():
    """PicoDet's heads (per stride: class probabilities [N, A, C], box distributions [N, A, 4 x 8] logits): anchors at
    (column + 0.5, row + 0.5) x stride, each side the expectation over its bins x stride."""
    scores = [np.full((1, 64, 3), 0.01, np.float32), np.full((1, 16, 3), 0.01, np.float32)]  # a 64x64 input: strides 8 and 16
    bins = [np.full((1, 64, 32), -4.0, np.float32), np.full((1, 16, 32), -4.0, np.float32)]
    scores[0][0, 2 * 8 + 3, 1] = 0.9  # row 2, column 3 of stride 8: centre (28, 20)
    bins[0][0, 2 * 8 + 3].reshape(4, 8)[:, 2] = 20.0  # every side 2 bins: 16 pixels
    outputs = {"s8": scores[0], "b8": bins[0], "s16": scores[1], "b16": bins[1]}
    assert detector_layout(outputs) == "picodet"
    decoded = decode(outputs, None, (64, 64))
    first = decoded.detections[0]
    assert decoded.how == "picodet" and first["classes"][0] == 1 and first["scores"][0] == pytest.approx(0.9)
    np.testing.assert_allclose(first["boxes"][0], [12, 4, 44, 36], atol=1e-4)
    with pytest.raises(EdgekitError, match="a PicoDet level of 64 anchors matches no stride of a 96x64 input"):
        decode(outputs, None, (96, 64))


def test_a_postprocess_function_decodes_anything_and_bad_returns_are_one_error(tmp_path, monkeypatch):
    (tmp_path / "decoders.py").write_text(
        "import numpy as np\n"
        "def boxes(outputs):\n"
        "    return [{'boxes': [[1, 2, 3, 4]], 'scores': [0.9], 'classes': [2]} for _ in outputs['y']]\n"
        "def broken(outputs):\n"
        "    return [{'boxes': [[1, 2, 3, 4]], 'scores': [0.9, 0.8], 'classes': [2]} for _ in outputs['y']]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    decoded = decode({"y": np.zeros((3, 7))}, "decoders:boxes", (8, 8))
    assert len(decoded.detections) == 3 and decoded.detections[0]["classes"].tolist() == [2]
    with pytest.raises(EdgekitError, match="sample 0 has 1 boxes, 2 scores and 1 classes"):
        decode({"y": np.zeros((3, 7))}, "decoders:broken", None)


def test_map_comes_from_cocoeval_and_falls_when_detections_go():
    out, truth = _yolov8()
    exact = coco_score(truth, decode({"y": out}, None, None).detections, list(range(5)))
    assert exact.map50 == pytest.approx(1.0) and exact.map50_95 == pytest.approx(1.0)
    damaged = out.copy()
    damaged[:20, 4:] *= 0.01  # half the images lose every confident detection
    scores = detection_scores({"y": out}, {"y": damaged}, BoxLabels(truth, {c: f"class {c}" for c in range(5)}), None, (96, 96))
    assert scores["vs_reference"]["map50"] < 0.7
    low, high = scores["vs_reference"]["map50_ci95"]
    assert low <= scores["vs_reference"]["map50"] <= high and high - low > 0.01
    labelled = scores["vs_labels"]
    assert labelled["reference"] == pytest.approx(1.0) and labelled["drop_points"] > 30
    assert labelled["drop_ci95"][0] > 0  # paired over the same images: the drop is sure
    assert {c["sample"] for c in scores["changes"]} <= set(range(20)) and scores["changes"][0]["missed"] >= 1
    assert scores["changes"][0]["f1"] == 0.0


def test_coco_and_yolo_labels_match_samples_by_name_or_row(tmp_path):
    coco = {
        "images": [
            {"id": 7, "file_name": "b.png", "width": 200, "height": 100},
            {"id": 3, "file_name": "a.png", "width": 200, "height": 100},
        ],
        "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [20, 10, 40, 20], "iscrowd": 0}],
        "categories": [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}],
    }
    (tmp_path / "instances.json").write_text(json.dumps(coco))
    labels = read_box_labels(tmp_path / "instances.json", ["photos/a.png", "photos/b.png"], (50, 100))
    assert [len(t["boxes"]) for t in labels.truth] == [0, 1]
    assert labels.truth[1]["boxes"].tolist() == [[10, 5, 30, 15]]  # scaled 200x100 -> 100x50
    assert labels.truth[1]["classes"].tolist() == [0] and labels.names == {0: "person", 1: "car"}  # ids in order: classes 0, 1
    by_row = read_box_labels(tmp_path / "instances.json", ["canvases.npz[1]"], (100, 200))
    assert len(by_row.truth[0]["boxes"]) == 1  # row 1 is the second image in id order (id 7)
    with pytest.raises(EdgekitError, match="have no image in"):
        read_box_labels(tmp_path / "instances.json", ["photos/c.png"], (50, 100))
    yolo = tmp_path / "labels"
    yolo.mkdir()
    (yolo / "a.txt").write_text("2 0.5 0.5 0.2 0.4\n")
    labels = read_box_labels(yolo, ["img/a.jpg", "img/empty.jpg"], (100, 200))
    assert labels.truth[0]["boxes"].tolist() == [[80, 30, 120, 70]] and labels.truth[0]["classes"].tolist() == [2]
    assert len(labels.truth[1]["boxes"]) == 0  # no file: no objects, as YOLO reads it


def test_probability_maps_count_false_marks_on_empty_maps_image_by_image():
    reference = np.zeros((8, 1, 32, 32), np.float32)
    reference[:6, :, 8:20, 4:28] = 0.9  # six images with a text line, two empty
    artifact = reference.copy()
    scores = probability_map_scores(reference, artifact, None, 0.5)["vs_reference"]
    assert scores["f1"] == 1.0 and scores["empty_maps"] == 2 and scores["false_on_empty"] == 0
    artifact[6, :, 0:2, 0:2] = 0.8  # four false pixels on an empty image
    scores = probability_map_scores(reference, artifact, None, 0.5)["vs_reference"]
    assert scores["false_on_empty"] == 1 and scores["f1"] == pytest.approx(7 / 8)  # pooled pixels would say 0.997
    masks = (reference[:, 0] > 0.5).astype(np.int64)
    labelled = probability_map_scores(reference, artifact, masks, 0.5)["vs_labels"]
    assert labelled["reference"] == 1.0 and labelled["drop_points"] == pytest.approx(12.5)
    logits = probability_map_scores(reference * 20 - 10, artifact * 20 - 10, None, 0.5)["vs_reference"]
    assert logits["logits"] and logits["f1"] == pytest.approx(7 / 8)
    rounded = reference.copy()
    rounded[0, 0, 8, 4] = np.float32(1.0000001)  # ONNX Runtime's fp32 Sigmoid: a probability map all the same
    scores = probability_map_scores(rounded, artifact, None, 0.5)["vs_reference"]
    assert not scores["logits"] and scores["f1"] == pytest.approx(7 / 8)  # read as logits, every pixel would pass


def test_class_maps_score_miou_against_the_reference_and_masks():
    logits = RNG.normal(size=(6, 4, 16, 16)).astype(np.float32)
    same = class_map_scores(logits, logits, None)["vs_reference"]
    assert same["miou"] == 1.0 and same["pixel_accuracy"] == 1.0
    noisy = logits + RNG.normal(scale=1.0, size=logits.shape).astype(np.float32)
    scores = class_map_scores(logits, noisy, logits.argmax(1))
    assert 0.2 < scores["vs_reference"]["miou"] < 0.9
    assert scores["vs_labels"]["reference"] == 1.0 and scores["vs_labels"]["drop_points"] == pytest.approx(
        100 * (1 - scores["vs_reference"]["miou"])
    )


def test_embeddings_keep_their_neighbours_or_not():
    centres = RNG.normal(size=(5, 32))
    labels = np.repeat(np.arange(5), 20)
    vectors = centres[labels] + RNG.normal(scale=0.3, size=(100, 32))
    same = embedding_scores(vectors, vectors * 3.0, labels)
    assert same["vs_reference"]["recall_at_10"] == 1.0 and same["vs_reference"]["rank_correlation"] == pytest.approx(1.0)
    assert same["vs_labels"]["reference"] == 1.0 and same["vs_labels"]["drop_points"] == 0
    noisy = embedding_scores(vectors, vectors + RNG.normal(scale=0.4, size=vectors.shape), labels)
    assert noisy["vs_reference"]["recall_at_10"] < 0.8 and noisy["vs_reference"]["rank_correlation"] < 0.99


def test_regression_against_targets_is_r2_and_its_drop_in_points():
    from sklearn.metrics import r2_score

    from edgekit.metrics.task_metrics import regression_scores

    truth = RNG.uniform(0, 4, 300)
    reference = (truth + RNG.normal(0, 0.2, 300))[:, None]
    artifact = reference + RNG.normal(0, 0.1, (300, 1))
    scores = regression_scores(reference, artifact, truth)
    labelled = scores["vs_labels"]
    assert labelled["reference"] == pytest.approx(r2_score(truth, reference[:, 0]), abs=1e-12)
    assert labelled["artifact"] == pytest.approx(r2_score(truth, artifact[:, 0]), abs=1e-12)
    assert labelled["drop_points"] == pytest.approx(100 * (labelled["reference"] - labelled["artifact"]))
    low, high = labelled["drop_ci95"]
    assert low < labelled["drop_points"] < high and low > 0  # the noise added is a real loss
    assert labelled["artifact_mean_abs_error"] == pytest.approx(np.abs(artifact[:, 0] - truth).mean())
    worst = int(np.argmax(np.abs(artifact - reference)))
    assert scores["changes"][0] == {"sample": worst, "abs_error": pytest.approx(float(np.abs(artifact - reference).max()))}
    with pytest.raises(EdgekitError, match="2 value"):
        regression_scores(reference, artifact, np.stack([truth, truth], 1))
