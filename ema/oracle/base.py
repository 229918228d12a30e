"""The Oracle: images in, validated predictions out, scored in batches; subclasses say how one batch is scored."""

from __future__ import annotations

import numpy as np

from ema.data.arrays import MODEL_INPUT_SHAPE, to_pixels
from ema.errors import InputError
from ema.inputs import InputTransform
from ema.oracle.outputs import OUTPUT_KINDS, Predictions, interpret_outputs, numeric_outputs
from ema.validation import check_choice, check_positive_int

#: Images per call to the model.
DEFAULT_BATCH_SIZE = 4096
#: The shape our own models declare: (batch, channel, height, width).
IMAGE_INPUT_SHAPE = MODEL_INPUT_SHAPE


def prepare_inputs(
    pixels: np.ndarray, transform: InputTransform, input_shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """Scale, cast to float32 and reshape to the declared shape (e.g. flatten for (-1, 784)).

    uint8 images (n, H, W) are first turned into pixels in [0, 1], as torchvision's ``ToTensor``
    does. A function of its arguments alone (no model), so that a Spark job can prepare
    batches on its executors exactly as the in-process oracle does.
    """
    if pixels.dtype == np.uint8:
        if pixels.ndim != 3:
            raise InputError(f"expected uint8 images of shape (n, height, width), got shape {pixels.shape}")
        pixels = to_pixels(pixels)
    inputs = np.ascontiguousarray(transform.apply(pixels))
    if input_shape is None:
        return inputs
    target = (len(inputs), *input_shape[1:])
    if -1 in target[1:] or int(np.prod(target[1:])) != int(np.prod(inputs.shape[1:])):
        raise InputError(
            f"expected images that fit the model's declared input shape {input_shape}, got images of shape "
            f"{inputs.shape[1:]}"
        )
    return inputs.reshape(target)


class Oracle:
    """Scores images through a model in batches. Subclasses say how one batch is scored.

    Parameters
    ----------
    outputs : {"auto", "probabilities", "logits", "labels"}
        What the model returns.
    batch_size : int
        Images per call.
    transform : InputTransform
        The pixel scaling the model was trained on.
    input_shape : tuple of int, optional
        The model's declared input shape, (-1, ...); inputs are reshaped to it.
    """

    def __init__(
        self,
        *,
        outputs: str = "auto",
        batch_size: int = DEFAULT_BATCH_SIZE,
        transform: InputTransform = InputTransform(),
        input_shape: tuple[int, ...] | None = None,
    ) -> None:
        check_choice("outputs", outputs, OUTPUT_KINDS)
        check_positive_int("batch_size", batch_size)
        self.outputs, self.batch_size, self.transform, self.input_shape = outputs, batch_size, transform, input_shape

    #: How errors name the model.
    source = "the model"

    def _predict_batch(self, inputs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def prepare(self, pixels: np.ndarray) -> np.ndarray:
        """What this oracle hands the model for ``pixels``: :func:`prepare_inputs` with its transform and shape."""
        return prepare_inputs(pixels, self.transform, self.input_shape)

    def predict(self, pixels: np.ndarray) -> Predictions:
        """Validated predictions for ``pixels`` of shape (n, 1, 28, 28) in [0, 1], or uint8 images (n, 28, 28).

        Inputs are prepared one batch at a time: uint8 images (``ArraySet.x``) never exist
        as float32 all at once, so memory does not grow with the query set beyond the
        images themselves and the outputs.
        """
        pixels = np.asarray(pixels)
        if pixels.ndim == 0 or len(pixels) == 0:
            raise InputError(f"expected at least one image to score, got an array of shape {pixels.shape}")
        outputs = None
        for start in range(0, len(pixels), self.batch_size):
            images = pixels[start : start + self.batch_size]
            batch = numeric_outputs(self._predict_batch(self.prepare(images)), self.source)
            if outputs is None:
                # one array for all outputs: small per-batch arrays kept alive would pin the heap above
                # each batch's large temporaries, and memory would grow with the number of batches
                outputs = np.empty((len(pixels), *batch.shape[1:]), dtype=batch.dtype)
            if not np.can_cast(batch.dtype, outputs.dtype, "safe"):
                outputs = outputs.astype(
                    np.result_type(outputs.dtype, batch.dtype)
                )  # e.g. integer one-hot, then floats
            if batch.shape != (len(images), *outputs.shape[1:]):
                raise InputError(
                    f"expected model outputs of shape {(len(images), *outputs.shape[1:])} for a batch of "
                    f"{len(images)} images, got {batch.shape}"
                )
            outputs[start : start + len(images)] = batch
        return interpret_outputs(outputs, self.outputs)

    def predict_proba(self, pixels: np.ndarray) -> np.ndarray:
        """Class probabilities (one-hot for a label-only model)."""
        return self.predict(pixels).proba
