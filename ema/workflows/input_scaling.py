"""When the target does poorly on data it should know, try the usual other input scalings and suggest one.

A model trained on pixels 0-255, or on standardised pixels, does poorly on the default [0, 1]
pixels, and every verdict on it is then about a model fed the wrong inputs. The audit does not
switch scaling silently (the user may know better, and the verdicts would depend on a guess):
it scores a few reference images under each alternative and names the option that fits in
the warning.
"""

from __future__ import annotations

import numpy as np

from ema.data.arrays import ArraySet
from ema.inputs import InputTransform
from ema.oracle import Oracle

#: Reference accuracy below this under the default scaling makes the audit try the others.
POOR_ACCURACY = 0.5
#: An alternative is suggested only if it beats the default by at least this much accuracy.
MIN_GAIN = 0.2
#: Reference images scored per alternative.
TRIAL_IMAGES = 500


def alternatives(reference: ArraySet) -> dict[str, InputTransform]:
    """The scalings tried, by the option that selects each: 0-255, and standardised with the reference's statistics."""
    pixels = reference.x[:TRIAL_IMAGES].astype(np.float64) / 255.0
    mean, std = round(float(pixels.mean()), 4), round(float(pixels.std()), 4)
    return {
        "--input-scale 255": InputTransform(scale=255.0),
        f"--normalize {mean},{std}": InputTransform(mean=mean, std=max(std, 1e-4)),
    }


def scaling_suggestion(oracle: Oracle, reference: ArraySet, accuracy: float) -> str | None:
    """A warning naming the scaling option under which the target does far better on ``reference``; None if none.

    Only asked when the oracle uses the default scaling (pixels in [0, 1]) on a model that
    takes floats and ``accuracy`` (on ``reference``, under that scaling) is below
    :data:`POOR_ACCURACY`.
    """
    if accuracy >= POOR_ACCURACY or not oracle.transform.is_identity or oracle.input_spec.takes_integers:
        return None
    images, labels = reference.x[:TRIAL_IMAGES], reference.y[:TRIAL_IMAGES]
    tried = {
        option: float((oracle.with_transform(transform).predict_proba(images).argmax(axis=1) == labels).mean())
        for option, transform in alternatives(reference).items()
    }
    option, best = max(tried.items(), key=lambda item: item[1])
    if best < accuracy + MIN_GAIN:
        return None
    shown = ", ".join(f"{accuracy_of:.3f} with {name}" for name, accuracy_of in tried.items())
    return (
        f"target accuracy on the non-member reference is {accuracy:.3f} with pixels in [0, 1], and {shown}: the "
        f"model was probably trained on other inputs; rerun with {option} if so (the audit did not switch)"
    )
