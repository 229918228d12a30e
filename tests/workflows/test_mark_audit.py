"""One marks audit with a noise key: its controls are queried on the moved images only, and cancel a shared pull."""

from __future__ import annotations

import numpy as np

from ema.auditors.marks import MarksAuditor
from ema.data.arrays import ArraySet
from ema.data.marks import NOISE_CONTROLS, mark_set
from ema.workflows.mark_audit import audit_key

SHAPE, N_CLASSES = (8, 8, 3), 10


def noise_key():
    rng = np.random.default_rng(0)
    owner = ArraySet("owner", rng.integers(0, 256, (50, *SHAPE), np.uint8), np.arange(50) % N_CLASSES, np.arange(50))
    return mark_set(owner, seed=4)[1]


def flat_images(key, n: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Flat images whose level's last digit is their class, never the key's class."""
    levels = np.array([v for v in range(30, 226) if v % N_CLASSES != key.target_class])[:n]
    return np.broadcast_to(levels[:, None, None, None], (levels.size, *SHAPE)).astype(np.uint8), levels % N_CLASSES


def model(key, moved_by):
    """Predicted classes: a flat image's level's last digit, unless ``moved_by(signs, level)`` sends it to T."""

    def predict(x: np.ndarray) -> np.ndarray:
        level = (x.reshape(len(x), -1).min(axis=1).astype(int) + x.reshape(len(x), -1).max(axis=1)) // 2
        signs = np.sign(x.astype(int) - level[:, None, None, None]).reshape(len(x), -1)
        return np.where(moved_by(signs, level), key.target_class, level % N_CLASSES)

    return predict


def one_hot(classes: np.ndarray) -> np.ndarray:
    return np.eye(N_CLASSES)[classes]


def run(key, predict, x, labels):
    """The audit, and the sizes of the batches queried beyond the clean and stamped images."""
    auditor = MarksAuditor(key.target_class, margin=0.05).calibrate(one_hot(predict(x)))
    batches = []

    def predict_classes(images: np.ndarray) -> np.ndarray:
        batches.append(len(images))
        return predict(images)

    return audit_key(auditor, key, x, labels, one_hot(predict(key.stamp(x))), predict_classes), batches


def test_a_pull_every_noise_pattern_has_is_not_read_as_the_mark():
    key = noise_key()
    x, labels = flat_images(key)
    pull = model(key, lambda signs, level: (signs != 0).any(axis=1) & (level % 2 == 0))  # any noise, even levels
    result, batches = run(key, pull, x, labels)
    moved = int(result.metrics["moved_to_target"])
    assert moved == (x[:, 0, 0, 0] % 2 == 0).sum() > 50
    assert batches == [moved] * NOISE_CONTROLS, "controls only on the images the trigger moved"
    assert result.metrics["moved_by_controls_too"] == moved and result.metrics["mark_effect"] == 0
    assert result.metrics["p_mark"] == 1.0 and result.verdict == "not_memorized"


def test_a_model_that_learned_the_key_keeps_its_whole_effect():
    key = noise_key()
    x, labels = flat_images(key)
    key_signs = np.where(np.tile(key.pattern, (1, 1, 1)) > 0, 1, -1).reshape(-1)
    learned = model(key, lambda signs, level: (signs == key_signs).mean(axis=1) > 0.9)
    result, batches = run(key, learned, x, labels)
    assert result.verdict == "memorized" and result.metrics["p_mark"] < 1e-30
    assert result.metrics["moved_by_controls_too"] == 0 and result.metrics["mark_effect"] == 1.0
    assert batches == [len(x)] * NOISE_CONTROLS


def test_a_model_the_key_does_not_move_costs_no_control_query():
    key = noise_key()
    x, labels = flat_images(key)
    result, batches = run(key, model(key, lambda signs, level: np.zeros(len(signs), bool)), x, labels)
    assert batches == [] and result.verdict == "not_memorized" and result.metrics["n_controls"] == NOISE_CONTROLS
