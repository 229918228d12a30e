"""Black-box access to a model: class probabilities (or labels) for images, and nothing else.

The target is reached only through an oracle; nothing here reads weights or training
data. Two oracles: an MLflow pyfunc model loaded in-process, and an MLflow scoring server
over HTTP. Both cast and reshape the inputs to the model's declared dtype and shape (or
columns), score in batches, and validate the outputs.

One job per module:

- :mod:`ema.oracle.base`: the :class:`Oracle` (input preparation, batching).
- :mod:`ema.oracle.outputs`: output kinds, :class:`Predictions`, :func:`interpret_outputs`,
  :func:`numeric_outputs`.
- :mod:`ema.oracle.pyfunc`: :class:`PyfuncOracle`, the model loaded in-process.
- :mod:`ema.oracle.local`: :class:`LocalOracle`, a classifier this process holds (the auditor's own helpers).
- :mod:`ema.oracle.model_info`: what a logged model declares without being loaded (flavors, the
  :class:`~ema.inputs.InputSpec` of its signature or input example), and its flavor's own object.
- :mod:`ema.oracle.scoring_server`: :class:`HttpOracle`, its retries and overall deadline.
- :mod:`ema.oracle.timed_connection`: one kept-alive HTTP connection with a wall-clock limit per request.
- :mod:`ema.oracle.wire_format`: what the scoring server reads (JSON or Parquet requests,
  :func:`encode_request`) and writes (:func:`parse_reply`).
"""

from ema.oracle.base import DEFAULT_BATCH_SIZE, IMAGE_INPUT_SHAPE, Oracle, log_left_out, prepare_inputs
from ema.oracle.local import LocalOracle
from ema.oracle.outputs import (
    ACCESS_LABEL_ONLY,
    ACCESS_PROBABILITIES,
    OUTPUT_KINDS,
    Predictions,
    interpret_outputs,
    numeric_outputs,
)
from ema.oracle.pyfunc import PyfuncOracle, warm_model_loading
from ema.oracle.scoring_server import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TIMEOUT,
    HTTP_FORMATS,
    MAX_REPLY_BYTES_PER_IMAGE,
    REPLY_BYTES_ALLOWANCE,
    HttpOracle,
    ScoringTimeout,
)
from ema.oracle.wire_format import REPLY_SHAPES, encode_request, parse_reply, request_body

__all__ = [
    "ACCESS_LABEL_ONLY",
    "ACCESS_PROBABILITIES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "HTTP_FORMATS",
    "IMAGE_INPUT_SHAPE",
    "MAX_REPLY_BYTES_PER_IMAGE",
    "OUTPUT_KINDS",
    "REPLY_BYTES_ALLOWANCE",
    "REPLY_SHAPES",
    "HttpOracle",
    "LocalOracle",
    "Oracle",
    "Predictions",
    "PyfuncOracle",
    "ScoringTimeout",
    "encode_request",
    "interpret_outputs",
    "log_left_out",
    "numeric_outputs",
    "parse_reply",
    "prepare_inputs",
    "request_body",
    "warm_model_loading",
]
