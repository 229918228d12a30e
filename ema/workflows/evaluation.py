"""The ``ema`` MLflow evaluator: ``mlflow.models.evaluate(..., evaluators=["ema"])`` runs the audit workflow.

:class:`EMAEvaluator` is what the ``mlflow.model_evaluator`` entry point names. Its MLflow
glue (finding the registered version, reading the evaluation table, logging on the
evaluation run) is inherited from :class:`ema.tracking.evaluator.AuditEvaluator`; here
the evaluator config becomes an :class:`~ema.workflows.audit.AuditConfig` and the audit
runs through :func:`ema.workflows.audit.audit`, the same function ``ema audit`` calls.
"""

from __future__ import annotations

import numbers
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ema.auditors.reference_record import AUTO_MARGIN
from ema.data.arrays import ArraySet
from ema.data.files import holds_set, write_set
from ema.errors import InputError
from ema.tracking import keys
from ema.tracking.evaluator import AuditEvaluator
from ema.tracking.runs import set_tags
from ema.validation import redact_url
from ema.workflows.audit import AuditConfig, SuppliedCalibration, audit
from ema.workflows.target import transform_from_options

#: Evaluator config keys that are AuditConfig fields of the same name (see `ema audit --help`).
SAME_NAME = (
    "method",
    "test",
    "alpha",
    "k",
    "cal_seed",
    "threshold_mode",
    "outputs",
    "calibration_name",
    "margin",
    "certify_level",
    "augment",
    "max_query",
    "strict",
    "figures",
    "label_column",
    "allow_missing",
    "pixel_order",
)
#: Evaluator config keys named as `ema audit`'s options -> AuditConfig fields.
RENAMED = {
    "recipe": "recipe_file",
    "reference": "reference_file",
    "members": "members_file",
    "calibration_file": "calibration_file",
}
#: The three keys of an already-trained calibration model: all or none.
CALIBRATION_KEYS = ("calibration_model", "calibration_members", "calibration_nonmembers")
#: The one format the evaluator keeps a query file in (`query_file`): an archive as :func:`write_set` writes it.
KEPT_QUERY_SUFFIX = ".npz"
#: The kinds of value a key takes, as messages name them.
TEXT, NUMBER, INTEGER, FLAG, PATH = "a string", "a number", "an integer", "True or False", "a file path (str)"
MARGIN = f"a number or {AUTO_MARGIN!r}"
#: What each kind of value is, as a check (a bool is not a number: ``alpha=True`` is a mistake).
KINDS = {
    TEXT: lambda value: isinstance(value, str),
    NUMBER: lambda value: isinstance(value, numbers.Real) and not isinstance(value, bool),
    INTEGER: lambda value: isinstance(value, numbers.Integral) and not isinstance(value, bool),
    FLAG: lambda value: isinstance(value, (bool, np.bool_)),
    PATH: lambda value: isinstance(value, (str, os.PathLike)),
    MARGIN: lambda value: value == AUTO_MARGIN or (isinstance(value, numbers.Real) and not isinstance(value, bool)),
}
#: Every evaluator config key (those above, and the ones read here: input representation, where to keep the
#: query file, progress bars) with the kind of value it takes; None means the key's default.
KEY_KINDS = {
    "model_uri": TEXT,
    "method": TEXT,
    "test": TEXT,
    "alpha": NUMBER,
    "k": INTEGER,
    "cal_seed": INTEGER,
    "threshold_mode": TEXT,
    "outputs": TEXT,
    "calibration_name": TEXT,
    "margin": MARGIN,
    "certify_level": NUMBER,
    "augment": TEXT,
    "strict": FLAG,
    "figures": FLAG,
    "recipe": PATH,
    "reference": PATH,
    "members": PATH,
    "calibration_model": TEXT,
    "calibration_members": PATH,
    "calibration_nonmembers": PATH,
    "calibration_file": PATH,
    "label_column": TEXT,
    "allow_missing": FLAG,
    "input_scale": NUMBER,
    "normalize": TEXT,
    "pixel_order": TEXT,
    "query_file": PATH,
    "kind": TEXT,
    "max_query": INTEGER,
    "progress": FLAG,
}
#: What a wrong value of a key most likely meant, and the fix.
HINTS = {
    "recipe": (
        ": write the recipe to a JSON or YAML file and pass its path, so that the report's command can rerun the audit"
    ),
    "normalize": ': give "MEAN,STD" (or the means then the stds per channel, or "imagenet"), as --normalize takes it',
}


def check_evaluator_config(config: Mapping[str, object]) -> dict[str, object]:
    """The evaluator config without its None values (a key's default), every key known and of its kind.

    Raises
    ------
    InputError
        On an unknown key (a typo would otherwise be ignored silently), a value of the wrong
        type (naming the key, the kind it takes and what arrived), an incomplete calibration
        triple, or a ``query_file`` not named ``.npz`` (:func:`check_query_file_suffix`).
    """
    unknown = sorted(set(config) - set(KEY_KINDS), key=str)
    if unknown:
        raise InputError(f"unknown ema evaluator config keys {unknown}; expected some of {sorted(KEY_KINDS)}")
    given = {key: value for key, value in config.items() if value is not None}
    for key, value in given.items():
        kind = KEY_KINDS[key]
        if not KINDS[kind](value):
            raise InputError(
                f"expected ema evaluator config key {key!r} as {kind}, got {type(value).__name__} "
                f"{redact_url(repr(value))[:80]}{HINTS.get(key, '')}"
            )
    supplied = tuple(given.get(key) for key in CALIBRATION_KEYS)
    if any(supplied) and not all(supplied):
        got = dict(zip(CALIBRATION_KEYS, supplied, strict=True))
        raise InputError(f"expected all of {list(CALIBRATION_KEYS)} or none, got {got}")
    if "query_file" in given:
        check_query_file_suffix(given["query_file"])
    return given


def check_query_file_suffix(query_file: str | os.PathLike) -> None:
    """Refuse a ``query_file`` not named ``.npz``: the evaluator keeps the table as an ``.npz`` archive.

    Reading a set dispatches on the suffix, so an archive kept under a ``.csv`` or ``.parquet``
    name could not be read back (by this audit or the report's command), and it would then
    block every rerun (the evaluator never overwrites a file). Checked with the config, before
    anything is written.

    Raises
    ------
    InputError
        If the name does not end in ``.npz``.
    """
    suffix = Path(query_file).suffix
    if suffix.lower() != KEPT_QUERY_SUFFIX:
        got = f"suffix {suffix!r}" if suffix else "no suffix"
        raise InputError(
            f"expected ema evaluator config key 'query_file' as a path ending in {KEPT_QUERY_SUFFIX} (the evaluator "
            f"keeps the table as an .npz query file), got {str(query_file)!r} ({got}); name it "
            f"{Path(query_file).stem or 'query'}{KEPT_QUERY_SUFFIX}"
        )


def audit_config(
    model_uri: str,
    query_file: str,
    config: Mapping[str, object],
    *,
    query_label: str | None = None,
    temporary: bool = False,
) -> AuditConfig:
    """The AuditConfig an evaluator config (as :func:`check_evaluator_config` returns it) asks for, validated.

    ``query_label`` names the query in the audit's run and records (the MLflow dataset's name); ``temporary``
    says that ``query_file`` is deleted after the audit (no ``query_file`` key), which the report then says.

    Raises
    ------
    InputError
        On any option AuditConfig refuses.
    """
    supplied = tuple(config.get(key) for key in CALIBRATION_KEYS)
    return AuditConfig(
        model_uri=model_uri,
        query_file=query_file,
        query_label=query_label,
        query_file_temporary=temporary,
        transform=transform_from_options(config.get("input_scale"), config.get("normalize")),
        calibration=SuppliedCalibration(*map(str, supplied)) if all(supplied) else None,
        **{key: config[key] for key in SAME_NAME if key in config},
        **{field: str(config[key]) for key, field in RENAMED.items() if key in config},
    ).validate()


def kept_query_path(query_file: str | os.PathLike) -> Path:
    """Where ``query_file`` is: its folder resolved (``..`` and links followed), its own name kept.

    The name itself is not followed, so that a link placed there counts as something that
    exists, which the evaluator never replaces.
    """
    path = Path(query_file)
    return path.parent.resolve() / path.name


def keep_query(query: ArraySet, path: Path) -> None:
    """Write ``query`` to ``path`` as a query file, atomically and never over anything already there.

    A file at ``path`` that holds exactly this table (same images, labels and positions) is
    kept as it is: the same evaluation can run twice.

    Raises
    ------
    InputError
        If something else is at ``path``, or its folder cannot be written.
    """
    exists = (
        f"ema evaluator config key 'query_file': {path} already exists and holds something other than the "
        "evaluated table; the evaluator never overwrites a file: name a new path, or move that file away"
    )
    if os.path.lexists(path):
        if holds_set(path, query):
            return
        raise InputError(exists)
    try:
        write_set(query, path, overwrite=False)
    except FileExistsError:
        raise InputError(exists) from None
    except OSError as exc:
        raise InputError(
            f"ema evaluator config key 'query_file': could not write {path}: {exc.strerror or exc}; expected a "
            "path in an existing folder this process may write to"
        ) from None


class EMAEvaluator(AuditEvaluator):
    """``evaluators=["ema"]``: audit the evaluation table as a query set, as ``ema audit --query-file`` does.

    Evaluator config (``evaluator_config={"ema": {...}}``), every key optional:
    ``method``, ``test``, ``alpha``, ``k``, ``cal_seed``, ``threshold_mode``, ``outputs``,
    ``calibration_name``, ``recipe``, ``reference``, ``members``, ``margin``, ``max_query``, ``strict``,
    ``figures``, ``calibration_file``, ``label_column`` and ``allow_missing`` (of the evaluated table and the
    table files among them: missing numbers go to the model as NaN), ``input_scale``,
    ``normalize``, ``pixel_order``, and ``calibration_model`` with ``calibration_members`` and
    ``calibration_nonmembers``:
    as the `ema audit` options of the same names (``recipe``, ``reference``, ``members``,
    ``calibration_file`` and the calibration samples are file paths). ``model_uri``: the registered version to
    audit when the loaded model's cannot be told. ``query_file``: where to keep the table
    as a query ``.npz`` (a path ending in ``.npz``; another suffix is refused up front), so
    that the report's command can rerun the audit (default: a temporary file, deleted
    afterwards); it is never written over an existing file (one holding exactly this table is
    used as it is), and its resolved path is the evaluation run's tag ``ema.query_file``.
    ``progress``: show progress bars (default False).
    """

    def checked_config(self, config: dict[str, object]) -> dict[str, object]:
        return check_evaluator_config(config)

    def run_audit(self, model_uri: str, query: ArraySet, config: Mapping[str, object]) -> str:
        keep = config.get("query_file")
        with tempfile.TemporaryDirectory() as tmp:
            path = kept_query_path(keep) if keep else Path(tmp) / f"{query.name}.npz"
            # every option checked before a file is written
            request = audit_config(model_uri, str(path), config, query_label=query.name, temporary=not keep)
            if keep:
                keep_query(query, path)
                set_tags({keys.TAG_QUERY_FILE: str(path)})
            else:
                write_set(query, path)
            outcome = audit(request, progress=bool(config.get("progress", False)))
        return outcome.run_id
