"""The references an audit compares a query with: samples known to be in the target's training data, and not.

Both are scored through the target's own oracle, so no assumption about another model is
needed. Where the members come from, in order:

1. ``--members FILE.npz``, for any model;
2. the target's lineage, for a version ``ema train`` registered: its data source and split seed
   give the training folds, checked against the training-data fingerprint on the version;
3. for any other registered version, the training data its run logged with
   ``mlflow.log_input(..., context="training")`` when that is a readable local ``.npz`` file;
4. none: the calibrated auditor then falls back to transferring member behaviour from its
   calibration model (with that route's guard).

The audited query's own samples are always left out of the member reference (auditing M1
uses M2..M5), matched by image and label.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.files import read_set
from ema.tracking import keys
from ema.tracking.runs import training_dataset_files
from ema.workflows.target import Target


@dataclass(frozen=True)
class Reference:
    """Reference samples and, for the run's tags, where they came from."""

    data: ArraySet
    description: str


def _row_keys(data: ArraySet) -> np.ndarray:
    """One opaque key per sample (image bytes and label), comparable with ``np.isin``."""
    pixels = np.ascontiguousarray(data.x).reshape(len(data), -1)
    rows = np.concatenate([pixels, data.y.astype("<i8").view(np.uint8).reshape(len(data), -1)], axis=1)
    return rows.view(np.dtype((np.void, rows.shape[1]))).ravel()


def without_query(pool: ArraySet, query: ArraySet) -> ArraySet:
    """``pool`` minus every sample that also stands in ``query`` (same image and label)."""
    keep = ~np.isin(_row_keys(pool), _row_keys(query))
    return pool.take(np.flatnonzero(keep), name=f"{pool.name} without the query")


def member_reference(target: Target, query: ArraySet | None, members_file: str | None = None) -> Reference | None:
    """Samples known to be in the target's training data, the query's own left out; None when none are known.

    ``query`` None: the query is a table this process never holds (the Spark engine), so
    nothing is left out; the description says so.
    """
    if members_file is not None:
        pool, source = read_set(members_file), f"file {members_file}"
    elif _lineage_is_known(target):
        pool, source = (
            target.splits().train,
            f"training data of {target.label} ({target.data}, split seed {target.data_seed})",
        )
    elif (logged := _logged_training_file(target)) is not None:
        pool, source = read_set(logged), f"training dataset {logged} logged by run {target.version.run_id}"
    else:
        return None
    members = without_query(pool, query) if query is not None else pool
    if len(members) == 0:
        return None
    left_out = "the query's own left out" if query is not None else "the query (a Spark table) not left out"
    return Reference(members, f"{source}: {len(members)} samples, {left_out}")


def nonmember_reference(target: Target, reference_file: str | None = None) -> Reference:
    """Samples the target never saw: ``--reference FILE.npz``, else its clean calibration set."""
    if reference_file is not None:
        data = read_set(reference_file)
        return Reference(data, f"file {reference_file}: {len(data)} samples")
    data = target.splits().calibration
    return Reference(data, f"clean calibration set of {target.data}: {len(data)} samples")


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
    if target.version.tags.get(keys.TAG_ROLE) != "target":
        return False
    return target.splits().train.fingerprint == target.version.tags[keys.TAG_DATA_FINGERPRINT]
