"""The references an audit compares a query with: samples known to be in the target's training data, and not.

Both are scored through the target's own oracle, so no assumption about another model is
needed. Where the members come from, in order:

1. ``--members FILE`` (``.npz``, ``.csv`` or ``.parquet``), for any model;
2. the target's lineage, for a version ``ema train`` registered: its data source and split seed
   give the training folds, checked against the training-data fingerprint on the version;
3. for a version ``ema unlearn`` registered: the training data of the version it was unlearned
   from (found the same way, recursively) minus the forget set its run logged (``forget.npz``),
   checked against the retained data's fingerprint on the version: the forget set is no
   longer a member;
4. for any other registered version, the training data its run logged with
   ``mlflow.log_input(..., context="training")`` when that is a readable local ``.npz`` file;
5. none: the calibrated auditor then falls back to transferring member behaviour from its
   calibration model (with that route's guard).

The audited query's own samples are always left out of the member reference (auditing M1
uses M2..M5), matched by image (or table row, a missing cell equal to a missing cell) and label.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ema.data.arrays import ArraySet, canonical_nan, check_within_classes, in_query_layout
from ema.data.files import read_set
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import EMAError, InputError
from ema.inputs import cells_as_text, text_columns
from ema.limits import check_deadline
from ema.oracle import ACCESS_PROBABILITIES, Oracle, Predictions
from ema.run_warnings import FOR_THE_RECORD
from ema.tracking import keys
from ema.tracking.registry import resolve_version
from ema.tracking.runs import MissingArtifact, download_artifact, training_dataset_files
from ema.workflows.target import Target

#: How a missing ``--members`` or ``--reference`` file is named (:func:`ema.data.files.read_set`).
MEMBERS_ROLE = "members file (--members)"
REFERENCE_ROLE = "reference file (--reference)"


@dataclass(frozen=True)
class Reference:
    """Reference samples and, for the run's tags, where they came from."""

    data: ArraySet
    description: str


def scored(oracle: Oracle, data: ArraySet, *, role: str) -> Predictions:
    """The target's predictions (through ``oracle``) on ``data`` (the ``role``: a reference), refused naming it when
    its labels are not the classes the model outputs probabilities of (a label-only model's are those it answers).

    Raises
    ------
    InputError
        From :func:`~ema.data.arrays.check_within_classes`.
    """
    predictions = oracle.predict(data)
    if predictions.access == ACCESS_PROBABILITIES:
        check_within_classes(data, predictions.proba.shape[1], role=role)
    return predictions


def _row_keys(data: ArraySet, *blocks: np.ndarray) -> np.ndarray:
    """One opaque key per sample of ``data``: the bytes of its rows of ``blocks`` (each (n, ...) of one dtype) and
    of its label, comparable with ``np.isin`` between sets keyed alike (:func:`_sample_keys`).

    A missing cell (NaN, read with ``--allow-missing``) equals a missing cell (:func:`canonical_nan`): a record
    copied into two files keeps its gaps, and rows with the same values and the same gaps are the same record,
    to leave out of a reference as any other of the query's. A gap never equals a number.
    """
    parts = [
        canonical_nan(np.ascontiguousarray(block)).reshape(len(data), int(np.prod(block.shape[1:]))).view(np.uint8)
        for block in (*blocks, data.y.astype("<i8")[:, None])
    ]
    rows = np.concatenate(parts, axis=1)
    return rows.view(np.dtype((np.void, rows.shape[1]))).ravel()


def _check_alike(first: ArraySet, second: ArraySet) -> None:
    """Refuse two sets whose samples are not of one layout (a table of other columns): their rows cannot be compared.

    Raises
    ------
    InputError
        Naming both layouts.
    """
    # a grey image with its channel axis or without it: the same values
    if np.prod(second.x.shape[1:]) != np.prod(first.x.shape[1:]) or second.features != first.features:
        raise InputError(
            f"expected {second.name} laid out as {first.name} ({first.describe()}) to compare their samples, got "
            f"{second.describe()}"
        )


def _sample_keys(first: ArraySet, second: ArraySet) -> tuple[np.ndarray, np.ndarray]:
    """The :func:`_row_keys` of two sets laid out alike, equal where their samples are: the same label, and the same
    inputs in their common dtype, or, for tables with text columns, the same cells as
    :func:`~ema.inputs.cells_as_text` writes them (3 and 3.0 alike, text ``"3"`` not).

    A table's numbers are not turned into text to compare them (3.4 s of an 8 s audit, three references of
    20,000 rows): a column both tables hold as numbers is keyed by its float64 bytes, equal exactly where its float64
    text is (that text is the shortest that reads back as the same float; a NaN of any bits is ``nan``, as
    :func:`canonical_nan` makes it one; neither makes -0.0 equal to 0.0). The columns that are text in either
    table (where the other holds numbers, their float64 text is what its text is compared with, as it always was)
    are written as text once, and both tables' cells together factorised into integer codes: equal exactly where
    the text is, whatever column a cell stands in.

    Raises
    ------
    InputError
        If the sets are not of one layout (:func:`_check_alike`).
    """
    _check_alike(first, second)
    if first.x.dtype != object and second.x.dtype != object:
        dtype = np.result_type(first.x, second.x)
        first_keys, second_keys = (_row_keys(data, data.x.astype(dtype, copy=False)) for data in (first, second))
        return first_keys, second_keys
    text = text_columns(first.x) | text_columns(second.x)
    cells = np.concatenate([cells_as_text(first.x[:, text]), cells_as_text(second.x[:, text])])
    codes = pd.factorize(cells.ravel())[0].reshape(cells.shape)
    numbers = [data.x[:, ~text].astype(np.float64) for data in (first, second)]
    return _row_keys(first, numbers[0], codes[: len(first)]), _row_keys(second, numbers[1], codes[len(first) :])


def _comparable(first: ArraySet, second: ArraySet) -> tuple[ArraySet, ArraySet]:
    """Two sets laid out alike to compare their samples: of two tables, the one holding the other's columns and more
    cut to them (a forget file's text columns beside a training file's numbers), in its order.

    Raises
    ------
    InputError
        If neither table holds all the other's columns (:func:`~ema.data.arrays.in_query_layout`).
    """
    if first.kind == second.kind == "table" and first.features != second.features:
        if set(first.features) >= set(second.features):
            return in_query_layout(first, second, role="set"), second
        return first, in_query_layout(second, first, role="set")
    return first, second


def without_query(pool: ArraySet, query: ArraySet) -> ArraySet:
    """``pool`` minus every sample that also stands in ``query`` (same image or row, whatever its dtype, and label;
    of tables, in the columns both hold).

    Keying 20,000 rows of 30 numbers and 3 text columns against as many takes about 0.07 s (:func:`_sample_keys`;
    3 s with every cell as text): the command's ``--timeout`` is checked before and after, as it is between the
    batches the references are then scored in.
    """
    step = f"match {pool.name} with {query.name}"
    check_deadline(step)
    pool_keys, query_keys = _sample_keys(*_comparable(pool, query))
    check_deadline(step)
    keep = ~np.isin(pool_keys, query_keys)
    return pool.take(np.flatnonzero(keep), name=f"{pool.name} without the query")


#: The share of a non-member reference that may be the target's training data before it is refused; any is warned of.
MOST_SHARED = 0.5


def check_disjoint(members: Reference, nonmembers: Reference) -> None:
    """Refuse a non-member reference that is mostly the target's training data (samples of the member reference);
    warn, for the record, of one that holds some: the audit would compare the query with members as never seen.

    Raises
    ------
    InputError
        If at least :data:`MOST_SHARED` of the non-member reference is in the member reference.
    """
    shared = len(nonmembers.data) - len(without_query(nonmembers.data, members.data))
    if not shared:
        return
    words = (
        f"{shared} of the {len(nonmembers.data)} samples of the non-member reference ({nonmembers.description}) are "
        f"in the member reference ({members.description}), the target's training data"
    )
    if shared >= MOST_SHARED * len(nonmembers.data):
        raise InputError(
            f"expected a non-member reference of samples the target never saw, got {words}; give --reference FILE "
            "of data it was not trained on"
        )
    logging.getLogger(__name__).warning(
        "%s: the audit compares the query with them as samples never seen", words, extra=FOR_THE_RECORD
    )


#: How a member reference's description ends where the query is a Spark table this process never holds.
SPARK_QUERY_NOT_LEFT_OUT = ", the query (a Spark table) not left out"


def member_reference(
    target: Target,
    query: ArraySet | None,
    members_file: str | None = None,
    *,
    max_images: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
    unheld_query: str = SPARK_QUERY_NOT_LEFT_OUT,
) -> Reference | None:
    """Samples known to be in the target's training data, the query's own left out; None when none are known.

    ``query`` None: this process holds no query (a table on Spark's executors, or none at all,
    as in ``ema power``), so nothing is left out; the description ends with ``unheld_query``.
    Files are read only when they hold at most ``max_images`` images; a table file's labels are
    in ``label_column``.
    """
    if members_file:
        data = target.read_set(members_file, role=MEMBERS_ROLE, max_images=max_images, label_column=label_column)
        known = Reference(in_query_layout(data, query, role="members file") if query else data, f"file {members_file}")
    else:
        known = training_data(target, max_images=max_images)
    if known is None:
        return None
    if query is not None and query.kind == "table" and not members_file:  # columns the model never took, left out
        known = Reference(in_query_layout(known.data, query, role="training data"), known.description)
    members = without_query(known.data, query) if query is not None else known.data
    if len(members) == 0 and members_file:
        raise InputError(
            f"members file {members_file}: expected training samples besides the query's, got only the query's own "
            f"{len(known.data)}: a member reference must be other members (give none to audit without one)"
        )
    if len(members) == 0:
        return None
    counted = kept_words(len(members), len(known.data)) if query is not None else f"{len(members)} samples"
    return Reference(members, f"{known.description}: {counted}{'' if query is not None else unheld_query}")


def kept_words(kept: int, read: int) -> str:
    """How many samples a reference keeps of those it read, and how many were the query's (left out)."""
    left_out = read - kept
    return f"{kept} samples, {left_out} of the query's left out" if left_out else f"{kept} samples, none the query's"


def training_data(target: Target, *, max_images: int = DEFAULT_MAX_QUERY) -> Reference | None:
    """The target version's training data as its lineage records it (routes 2 to 4 above); None when unknown.

    Files its run logged are read only when they hold at most ``max_images`` images.
    """
    if _lineage_is_known(target):
        return Reference(
            target.splits().train, f"training data of {target.label} ({target.data}, split seed {target.data_seed})"
        )
    if (retained := _unlearned_training_data(target, max_images)) is not None:
        return retained
    if (logged := _logged_training_file(target)) is not None:
        role = f"training dataset logged by run {target.version.run_id}"
        return Reference(
            target.read_set(logged, role=role, max_images=max_images),
            f"training dataset {logged} logged by run {target.version.run_id}",
        )
    return None


def is_forget_set(target: Target, fingerprint: str) -> bool:
    """Whether a query of this ``fingerprint`` (as read, every column of its file) is the forget set the target
    version was unlearned from (by the fingerprint on the version)."""
    return target.version is not None and target.version.tags.get(keys.TAG_FORGET_FINGERPRINT) == fingerprint


def contains_all(pool: ArraySet, subset: ArraySet) -> np.ndarray:
    """Whether each sample of ``subset`` stands in ``pool`` (same image or row and label; of tables, in the columns both
    hold), shape (len(subset),)."""
    pool_keys, subset_keys = _sample_keys(*_comparable(pool, subset))
    return np.isin(subset_keys, pool_keys)


def nonmember_reference(
    target: Target,
    reference_file: str | None = None,
    *,
    query: ArraySet | None = None,
    max_images: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
) -> Reference:
    """Samples the target never saw: ``--reference FILE`` (of at most ``max_images``), else the splits' own
    non-member reference where the preset keeps one (Fashion-MNIST's unused images), else its clean calibration
    set (``--calibration-file`` when given).

    A file is laid out as ``query`` is. Every reference, like the member reference, leaves the query's
    own samples out: a query compared with itself would look like the non-members it is part of (a
    calibration file the query was drawn from). A default reference of another kind or shape than
    ``query`` (the preset's digits for a table or a colour model) is refused.

    Raises
    ------
    InputError
        If the reference holds only the query's samples, or the default reference is not of the query's kind
        (:func:`of_kind`).
    """
    if reference_file is not None:
        data = target.read_set(reference_file, role=REFERENCE_ROLE, max_images=max_images, label_column=label_column)
        if query is None:
            return Reference(data, f"file {reference_file}: {len(data)} samples")
        kept = without_query(in_query_layout(data, query, role="reference file"), query)
        if len(kept) == 0:
            raise InputError(
                f"reference file {reference_file}: expected samples besides the query's, got only the query's own "
                f"{len(data)}"
            )
        return Reference(kept, f"file {reference_file}: {kept_words(len(kept), len(data))}")
    if target.calibration_data is None and (unused := target.splits().reference) is not None:
        data, source = target.prepared(unused), f"unused images of {target.data} (no split holds them)"
    else:
        data, source = target.calibration_set(), target.describe_calibration()
    if query is None:
        return Reference(data, f"{source}: {len(data)} samples")
    give = "--reference FILE (or --calibration-file)"
    of_kind(Reference(data, f"{source}: {len(data)} samples"), query, "the query", give=give)
    kept = without_query(data, query)
    if len(kept) == 0:
        raise InputError(f"{source}: expected samples besides the query's, got only the query's own; give {give}")
    return Reference(kept if len(kept) < len(data) else data, f"{source}: {kept_words(len(kept), len(data))}")


def of_kind(reference: Reference, like: ArraySet, what: str, *, give: str = "--reference FILE") -> Reference:
    """``reference`` when its samples are of ``like``'s kind and shape (images of one size and channels, or a table
    of as many features); ``give`` names the option that supplies another.

    Raises
    ------
    InputError
        Naming both kinds and ``--reference``: a default reference is the preset's images whatever
        the model takes, and scoring a table's model on them fails with an image-shape error.
    """
    if like.layout != reference.data.layout:
        raise InputError(
            f"expected a non-member reference of {what}'s kind ({like.describe()}), got {reference.description} "
            f"({reference.data.describe()}): give {give} with samples of that kind the model never saw"
        )
    return reference


def _logged_training_file(target: Target) -> Path | None:
    """The first readable ``.npz`` the version's run logged as training data, if any."""
    if target.version is None or not target.version.run_id:
        return None
    files = [p for p in training_dataset_files(target.version.run_id) if p.suffix == ".npz" and p.is_file()]
    return files[0] if files else None


def _lineage_is_known(target: Target) -> bool:
    """A version ``ema train`` registered whose recorded training data is the data its splits give now."""
    if target.version is None or keys.TAG_DATA_FINGERPRINT not in target.version.tags:
        return False
    if target.version.tags.get(keys.TAG_ROLE) != keys.ROLE_TARGET:
        return False
    return target.splits().train.fingerprint == target.version.tags[keys.TAG_DATA_FINGERPRINT]


def _unlearned_training_data(target: Target, max_images: int) -> Reference | None:
    """An unlearned version's retained data: its source version's training data minus its forget set.

    None unless the version says it was unlearned, its source's training data is known, its
    run's ``forget.npz`` can be read, and the difference has the retained data's recorded fingerprint.
    """
    version = target.version
    if version is None or version.tags.get(keys.TAG_ROLE) != keys.ROLE_UNLEARNED or not version.run_id:
        return None
    try:
        source_version = resolve_version(f"models:/{version.name}/{version.tags.get(keys.TAG_UNLEARNED_FROM, '')}")
    except EMAError:  # the source version was deleted, or the tag is not a version number
        return None
    source_target = dataclasses.replace(target, version=source_version, model_uri=source_version.uri)
    source = training_data(source_target, max_images=max_images)
    if source is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        try:
            logged = download_artifact(version.run_id, keys.ARTIFACT_FORGET, folder)
            forget = read_set(logged, role=f"forget set logged by run {version.run_id}", max_images=max_images)
        except MissingArtifact:
            return None
    retained = without_query(source.data, forget)
    if retained.fingerprint != version.tags.get(keys.TAG_DATA_FINGERPRINT):
        return None
    return Reference(
        retained,
        f"retained data of {target.label} (the training data of v{source_version.version} minus the forget set "
        f"{version.tags.get(keys.TAG_FORGET, '')}, {len(forget)} samples)",
    )
