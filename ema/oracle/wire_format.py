"""The JSON an MLflow scoring server reads and writes: request bodies, replies and error messages."""

from __future__ import annotations

import json

import numpy as np

from ema.errors import InputError
from ema.oracle.outputs import stack_columns

#: Reply shapes accepted from a scoring server, as MLflow's scoring server writes them.
REPLY_SHAPES = (
    '{"predictions": [[...], ...]} (an array), {"predictions": [{"col": v, ...}, ...]} (a DataFrame\'s records), '
    '{"predictions": {"col": [...], ...}} (columns), or a bare list (MLflow 1.x)'
)


def inputs_json(inputs: np.ndarray) -> str:
    """``{"inputs": [...]}``: uint8 images as small integers, floats as float32 in their shortest exact form.

    Images hold few distinct values: each is formatted once, and the server's cast to the
    declared type restores the exact input. Raw uint8 images take a third of the bytes of
    their float32 pixels, and the server parses them faster (benchmarks/RESULTS.md).
    """
    if inputs.dtype == np.uint8:
        values, inverse = np.unique(inputs, return_inverse=True)
        table = values.astype(str)
    else:
        values, inverse = np.unique(inputs.astype(np.float32), return_inverse=True)
        table = np.array([np.format_float_positional(v, unique=True, trim="0") for v in values])
    text = table[inverse.reshape(inputs.shape)]
    for _ in range(inputs.ndim):
        text = np.array(["[" + ",".join(row) + "]" for row in text.reshape(-1, text.shape[-1])]).reshape(
            text.shape[:-1]
        )
    return '{"inputs":' + text.item() + "}"


def parse_reply(body: bytes, source: str = "the scoring server") -> object:
    """The predictions in a scoring server's JSON reply, in any shape MLflow's scoring server writes.

    MLflow writes ``{"predictions": ...}`` (plus optional metadata keys) where the
    predictions are an array's nested lists, a DataFrame's records ``[{"col": v}, ...]``,
    or whatever JSON the model returned, such as columns ``{"col": [...]}``; MLflow 1.x
    wrote the predictions bare. Records become rows (columns in the first record's order);
    a single column of vectors becomes those vectors.

    Raises
    ------
    InputError
        If the body is not JSON of one of these shapes.
    """
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(
            f"expected a JSON reply from {source} as {REPLY_SHAPES}, got {bytes(body[:80])!r}: "
            f"{' '.join(str(exc).split())[:200]}"
        ) from exc
    if isinstance(payload, dict):
        if "predictions" not in payload:
            keys = sorted(str(key) for key in payload)[:10]
            raise InputError(f"expected a JSON reply from {source} as {REPLY_SHAPES}, got an object with keys {keys}")
        payload = payload["predictions"]
    elif not isinstance(payload, list):
        raise InputError(f"expected a JSON reply from {source} as {REPLY_SHAPES}, got {type(payload).__name__}")
    if isinstance(payload, list) and payload and all(isinstance(row, dict) for row in payload):
        return _stack_records(payload, source)
    if isinstance(payload, dict):
        return stack_columns(payload, source)
    return payload


def _stack_records(records: list[dict], source: str) -> object:
    """DataFrame records ``[{"col": v, ...}, ...]`` as rows; one column of vectors becomes those vectors."""
    columns = list(records[0])
    if not columns or any(list(row) != columns for row in records):
        raise InputError(
            f"expected {source} to return records with the same columns in every row, got columns {columns[:10]} "
            f"in the first row and {next((list(r)[:10] for r in records if list(r) != columns), [])} in another"
        )
    if len(columns) == 1:
        return [row[columns[0]] for row in records]
    return [[row[column] for column in columns] for row in records]


def server_message(text: str) -> str:
    """The server's error message, on one line."""
    try:
        message = str(json.loads(text).get("message", text))
    except (ValueError, AttributeError, RecursionError):
        message = text
    return " ".join(message.split())[:500]
