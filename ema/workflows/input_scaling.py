"""Try the usual other input scalings (and pixel order) on a few reference images and suggest one that fits clearly
better.

A model trained on pixels 0-255, or on standardised pixels, does worse on the default [0, 1]
pixels, and every verdict on it is then about a model fed the wrong inputs. The drop need not
be to chance: a model trained on 0-255 pixels may keep 0.72 accuracy where it had 0.80, so the
probe runs on every audit that uses the default scaling, not only on poor accuracy. The audit does not
switch scaling silently (the user may know better, and the verdicts would depend on a guess):
it scores a few reference images under each alternative and names the option that fits in
the warning. Colour images flattened to fit a flat model input are tried in the other pixel
order too (``--pixel-order hwc``, alone and with each scaling): a scikit-learn model trained on
``x.reshape(n, -1)`` of (n, H, W, C) images takes them pixel by pixel, and channel by channel it
sees scrambled pixels (:mod:`ema.image_shapes`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ema.auditors.reference_gates import InputMismatch, input_mismatch
from ema.data.arrays import ArraySet
from ema.errors import EMAError
from ema.image_shapes import DEFAULT_PIXEL_ORDER, PIXEL_ORDERS, orders_pixels
from ema.input_transform import IMAGENET_NORMALIZE, InputTransform
from ema.inputs import InputSpec
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


def scaling_suggestion(oracle: Oracle, reference: ArraySet, proba: np.ndarray) -> InputMismatch | None:
    """The options under which the target does clearly better on ``reference``, in a warning; None if none.

    Never asked of a table (its features are not pixels). The scalings of :func:`alternatives`
    are tried when the oracle uses the default scaling (pixels in [0, 1]) on a model that takes
    floats; ``--pixel-order hwc`` (alone and with each scaling) when colour images are flattened
    to fit the model in the default order (:func:`pixel_orders`). ``proba`` are the target's
    probabilities on ``reference`` as sent; the first :data:`TRIAL_IMAGES` images are scored again
    under each alternative, and one is named when its accuracy beats the default's on those same
    images by :data:`MIN_GAIN`. When the default's accuracy is above ``1 - MIN_GAIN``, none can,
    and nothing is scored again.
    """
    if reference.kind == "table":
        return None
    images, labels = reference.x[:TRIAL_IMAGES], reference.y[:TRIAL_IMAGES]
    given = proba[:TRIAL_IMAGES].argmax(axis=1) == labels
    accuracy = float(given.mean())
    candidates = _alternative_oracles(oracle, reference)
    if not candidates or accuracy + MIN_GAIN > 1.0:  # nothing to try, or nothing can beat it by MIN_GAIN
        return None
    correct = {
        options: right
        for options, other in candidates.items()
        if (right := _correct_under(other, images, labels)) is not None
    }
    tried = {options: float(right.mean()) for options, right in correct.items()}
    better = {options: accuracy_of for options, accuracy_of in tried.items() if accuracy_of >= accuracy + MIN_GAIN}
    if not better:
        return None
    shown = ", ".join(f"{accuracy_of:.3f} with {' '.join(options)}" for options, accuracy_of in tried.items())
    warning = (
        f"target accuracy on {len(labels)} non-member reference images is {accuracy:.3f} "
        f"{_as_sent(oracle, reference)}, and {shown}: the model was probably trained on other inputs; rerun with "
        f"{' '.join(_named(better))} if so (the audit did not switch)"
    )
    return input_mismatch(warning, correct[max(better, key=better.get)], given)


def _named(better: dict[tuple[str, ...], float]) -> tuple[str, ...]:
    """Of the alternatives that beat the default, the one to name: the best, or the first part of it (fewer options)
    that does within :data:`MIN_GAIN` as well: a second option is named only where it clearly adds."""
    best = max(better, key=better.get)
    parts = [options for options in better if set(options) < set(best) and better[options] + MIN_GAIN > better[best]]
    return parts[0] if parts else best


def pixel_orders(oracle: Oracle, reference: ArraySet) -> dict[str, InputSpec]:
    """The other pixel order, by its option, when the reference's colour images are flattened to fit the model in the
    default order (a scikit-learn model trained on ``x.reshape(n, -1)`` takes them pixel by pixel); else none."""
    spec = oracle.input_spec
    if spec.pixel_order != DEFAULT_PIXEL_ORDER or not orders_pixels(spec.shape, reference.x.shape[1:]):
        return {}
    other = next(order for order in PIXEL_ORDERS if order != DEFAULT_PIXEL_ORDER)
    return {f"--pixel-order {other}": dataclasses.replace(spec, pixel_order=other)}


def _alternative_oracles(oracle: Oracle, reference: ArraySet) -> dict[tuple[str, ...], Oracle]:
    """The target under each alternative, by the options that select it: the scalings (where the default is used on
    a model taking floats), the other pixel order, and the two together; the fewer options first (named on a tie)."""
    scalings = {"": oracle.transform}
    if oracle.transform.is_identity and not oracle.input_spec.takes_integers:
        scalings.update(alternatives(reference))
    orders = {"": oracle.input_spec, **pixel_orders(oracle, reference)}
    return {
        tuple(filter(None, (order, scaling))): oracle.with_input_spec(spec).with_transform(transform)
        for order, spec in orders.items()
        for scaling, transform in scalings.items()
        if order or scaling
    }


def _as_sent(oracle: Oracle, reference: ArraySet) -> str:
    """How the reference reached the model, in words: its pixels' scale, and their order where they were flattened."""
    spec, transform = oracle.input_spec, oracle.transform
    if spec.takes_integers:
        scale = "with pixel values 0-255"
    else:
        scale = "with pixels in [0, 1]" if transform.is_identity else f"with pixels scaled {transform.describe()}"
    if not orders_pixels(spec.shape, reference.x.shape[1:]):
        return scale
    return f"{scale}, flattened {'channel by channel' if spec.pixel_order == DEFAULT_PIXEL_ORDER else 'pixel by pixel'}"


def _correct_under(oracle: Oracle, images: np.ndarray, labels: np.ndarray) -> np.ndarray | None:
    """Which of ``images`` the target gets right through ``oracle``; None when the model refuses the scaling (it is
    then not suggested).

    The probe runs on every audit, so a model that fails on inputs it was never meant to take
    (negative pixels into a square root) must not fail the audit.
    """
    try:
        return oracle.predict_proba(images).argmax(axis=1) == labels
    except EMAError:
        return None
