"""Real photos (bundled with scikit-image) as ImageNet-style inputs: a fixed set of crops and flips."""

from __future__ import annotations

import numpy as np

from edgekit.errors import EdgekitError

PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "retina",
    "hubble_deep_field",
    "immunohistochemistry",
    "stereo_motorcycle",
    "colorwheel",
    "camera",
    "coins",
    "clock",
    "moon",
    "horse",
)
# The ImageNet-1k classes that name what each photo shows, as ImageNet-ReaL labels do (every class a person would accept
# for the main object); chosen from the photos, and kept where fp32 gets them wrong (the clock). A photo no class names
# has none: astronaut, retina, the Hubble deep field, the stained tissue, the colour wheel, coins (no coin class), the moon,
# and the horse (a black silhouette; ImageNet's one horse class, sorrel, is a chestnut horse).
PHOTO_CLASSES = {
    "chelsea": (281, 282, 285),  # tabby, tiger cat, Egyptian cat
    "coffee": (504, 967, 968),  # coffee mug, espresso, cup
    "rocket": (657, 744),  # missile, projectile
    "stereo_motorcycle": (665, 670),  # moped, motor scooter
    "camera": (759, 872),  # reflex camera, tripod (the cameraman's)
    "clock": (409, 892),  # analog clock, wall clock
}
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def photos() -> list[np.ndarray]:
    """The bundled photos as uint8 RGB arrays (grey ones expanded to 3 channels)."""
    try:
        import skimage.data as data
    except ImportError:
        raise EdgekitError("real photos need scikit-image", hint="pip install scikit-image") from None
    images = []
    for name in PHOTOS:
        image = getattr(data, name)()
        image = image[0] if isinstance(image, tuple) else image
        image = np.repeat(image[..., None], 3, axis=2) if image.ndim == 2 else image[..., :3]
        images.append(np.asarray(image, np.uint8) if image.dtype == np.uint8 else (np.asarray(image) * 255).astype(np.uint8))
    return images


def photo_crops(count: int, size: int = 224, seed: int = 0) -> np.ndarray:
    """`count` deterministic random-resized crops (with flips) of the photos, RGB in [0, 1], NCHW float32.

    The input of zoo models that normalise inside (EfficientNet-Lite0)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    sources = photos()
    crops = np.empty((count, 3, size, size), np.float32)
    for i in range(count):
        image = sources[i % len(sources)]
        h, w = image.shape[:2]
        side = int(min(h, w) * rng.uniform(0.35, 1.0))
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = Image.fromarray(image[top : top + side, left : left + side]).resize((size, size), Image.BILINEAR)
        array = np.asarray(crop, np.float32) / 255.0
        array = array[:, ::-1] if rng.random() < 0.5 else array
        crops[i] = array.transpose(2, 0, 1)
    return crops


def crop_labels(count: int, classes: int = 1000) -> np.ndarray:
    """The label sets of `photo_crops(count, ...)`, as a [count, classes] boolean array (crop i is of photo i % 14; a
    photo without PHOTO_CLASSES gives a row of False): a crop is labelled by its photo, so one that misses the object
    still carries the photo's classes."""
    labels = np.zeros((count, classes), bool)
    for i in range(count):
        labels[i, list(PHOTO_CLASSES.get(PHOTOS[i % len(PHOTOS)], ()))] = True
    return labels


def imagenet_crops(count: int, size: int = 224, seed: int = 0) -> np.ndarray:
    """The same crops as `photo_crops`, normalised with ImageNet mean/std (torchvision-style models)."""
    crops = photo_crops(count, size, seed)
    return (crops - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None]
