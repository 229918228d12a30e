"""Try the usual other input scalings on a few reference images and suggest one that fits clearly better.

A model trained on pixels 0-255, or on standardised pixels, does worse on the default [0, 1]
pixels, and every verdict on it is then about a model fed the wrong inputs. The drop need not
be to chance: a model trained on 0-255 pixels may keep 0.72 accuracy where it had 0.80, so the
probe runs on every audit that uses the default scaling, not only on poor accuracy. The audit does not
switch scaling silently (the user may know better, and the verdicts would depend on a guess):
it scores a few reference images under each alternative and names the option that fits in
the warning.
"""

from __future__ import annotations

import numpy as np

from ema.data.arrays import ArraySet
from ema.errors import EMAError
from ema.input_transform import IMAGENET_NORMALIZE, InputTransform
from ema.oracle import Oracle

#: An alternative is suggested only if it beats the default by at least this much accuracy on the same images
#: (on 500 images, about four standard errors of a paired difference where 10% of the answers change).
MIN_GAIN = 0.05
#: Reference images scored per alternative.
TRIAL_IMAGES = 500


def alternatives(reference: ArraySet) -> dict[str, InputTransform]:
    """The scalings tried, by the option that selects each: 0-255, standardised with the reference's statistics
    (per channel for images with several), pixels in [-1, 1], and for colour images ImageNet's
    normalisation, which torchvision's pretrained models (and models fine-tuned from them) take."""
    pixels = reference.x[:TRIAL_IMAGES].astype(np.float64) / 255.0
    over = tuple(range(pixels.ndim - 1)) if pixels.ndim == 4 else None  # per channel of (n, H, W, C)
    mean, std = np.round(pixels.mean(axis=over), 4), np.round(np.maximum(pixels.std(axis=over), 1e-4), 4)
    standardised = InputTransform(mean=_numbers(mean), std=_numbers(std))
    # the standard options first: on a tie, the first best is named, not numbers of this reference's
    tried = {}
    if pixels.ndim == 4 and pixels.shape[-1] == len(IMAGENET_NORMALIZE[0]):
        tried["--normalize imagenet"] = InputTransform(mean=IMAGENET_NORMALIZE[0], std=IMAGENET_NORMALIZE[1])
    tried["--input-scale 255"] = InputTransform(scale=255.0)
    tried["--normalize 0.5,0.5"] = InputTransform(mean=0.5, std=0.5)  # pixels in [-1, 1]: Normalize((0.5,), (0.5,))
    tried[f"--normalize {standardised.normalize_text()}"] = standardised
    return tried


def _numbers(values: np.ndarray) -> float | tuple[float, ...]:
    """A statistic as a transform takes it: one number, or one per channel."""
    return float(values) if values.ndim == 0 else tuple(float(value) for value in values)


def scaling_suggestion(oracle: Oracle, reference: ArraySet, proba: np.ndarray) -> str | None:
    """A warning naming the scaling option under which the target does clearly better on ``reference``; None if none.

    Asked only when the oracle uses the default scaling (pixels in [0, 1]) on a model that
    takes floats, and never of a table (its features are not pixels). ``proba`` are the target's
    probabilities on ``reference`` under that scaling; the first :data:`TRIAL_IMAGES` images are
    scored again under each alternative, and one is named when its accuracy beats the default's on
    those same images by :data:`MIN_GAIN`. When the default's accuracy is above ``1 - MIN_GAIN``,
    none can, and nothing is scored again.
    """
    if not oracle.transform.is_identity or oracle.input_spec.takes_integers or reference.kind == "table":
        return None
    images, labels = reference.x[:TRIAL_IMAGES], reference.y[:TRIAL_IMAGES]
    accuracy = float((proba[:TRIAL_IMAGES].argmax(axis=1) == labels).mean())
    if accuracy + MIN_GAIN > 1.0:  # no scaling can beat it by MIN_GAIN: nothing to score
        return None
    tried = {
        option: accuracy_of
        for option, transform in alternatives(reference).items()
        if (accuracy_of := _accuracy_under(oracle.with_transform(transform), images, labels)) is not None
    }
    if not tried:
        return None
    option, best = max(tried.items(), key=lambda item: item[1])
    if best < accuracy + MIN_GAIN:
        return None
    shown = ", ".join(f"{accuracy_of:.3f} with {name}" for name, accuracy_of in tried.items())
    return (
        f"target accuracy on {len(labels)} non-member reference images is {accuracy:.3f} with pixels in [0, 1], and "
        f"{shown}: the "
        f"model was probably trained on other inputs; rerun with {option} if so (the audit did not switch)"
    )


def _accuracy_under(oracle: Oracle, images: np.ndarray, labels: np.ndarray) -> float | None:
    """Accuracy on ``images`` through ``oracle``; None when the model refuses the scaling (it is then not suggested).

    The probe runs on every audit, so a model that fails on inputs it was never meant to take
    (negative pixels into a square root) must not fail the audit.
    """
    try:
        return float((oracle.predict_proba(images).argmax(axis=1) == labels).mean())
    except EMAError:
        return None
