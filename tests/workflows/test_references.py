"""Member and non-member references: where they come from, and the query's own samples left out."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from click.testing import CliRunner

from ema.data.arrays import ArraySet
from ema.data.files import write_set
from ema.errors import InputError
from ema.inputs import cells_as_text
from ema.workflows.references import (
    Reference,
    check_disjoint,
    contains_all,
    member_reference,
    nonmember_reference,
    of_kind,
    without_query,
)
from ema.workflows.target import resolve_target
from ema_cli.cli import main


def images(n: int, offset: int) -> ArraySet:
    x = (np.arange(n, dtype=np.uint8)[:, None, None] + offset) * np.ones((1, 28, 28), np.uint8)
    return ArraySet("s", x, np.arange(n, dtype=np.int64) % 10, np.arange(n, dtype=np.int64))


def test_without_query_drops_exactly_the_shared_samples():
    pool = images(10, 0)
    kept = without_query(pool, pool.take(np.arange(3, 7), name="q"))
    assert sorted(kept.x[:, 0, 0].tolist()) == [0, 1, 2, 7, 8, 9]


def test_without_query_matches_a_missing_cell_with_a_missing_cell_never_with_a_number():
    """A record copied into two files keeps its gaps: rows with the same values and gaps are the same record (whatever
    bits the NaN has), and a gap is never equal to a number."""
    x = np.array([[1.0, np.nan], [2.0, 3.0], [np.nan, np.nan], [4.0, np.nan]])
    pool = ArraySet("pool", x, np.zeros(4, dtype=np.int64), np.arange(4, dtype=np.int64), ("a", "b"))
    query_x = np.array([[1.0, -np.nan], [np.nan, np.nan], [4.0, 5.0]])  # -nan: another NaN's bits
    query = ArraySet("query", query_x, np.zeros(3, dtype=np.int64), np.arange(3, dtype=np.int64), ("a", "b"))
    kept = without_query(pool, query)
    assert kept.index.tolist() == [1, 3]


def rows(cells: list[list[object]], labels: list[int] | None = None, name: str = "s") -> ArraySet:
    """A table of ``cells`` (object: numbers and text) with columns ``c0, c1, ...``, labels 0 unless given."""
    x = np.empty((len(cells), len(cells[0])), dtype=object)
    x[:] = cells
    y = np.array(labels if labels is not None else [0] * len(cells), dtype=np.int64)
    return ArraySet(name, x, y, np.arange(len(cells), dtype=np.int64), tuple(f"c{i}" for i in range(x.shape[1])))


def test_without_query_matches_a_table_with_text_by_value_a_gap_only_with_a_gap():
    """3 and 3.0 are one number, a NaN of any bits (or None) is a gap equal to a gap and never to a number."""
    pool = rows([[3, "a"], [1.5, "a"], [np.nan, "b"], [np.nan, "c"], [2.0, "d"], [-0.0, "e"]])
    query = rows([[3.0, "a"], [np.float32(1.5), "a"], [-np.nan, "b"], [0.0, "c"], [None, "d"], [0.0, "e"]], name="q")
    assert without_query(pool, query).index.tolist() == [3, 4, 5]
    assert contains_all(pool, query).tolist() == [True, True, True, False, False, False]


def test_without_query_keeps_a_same_table_row_with_another_label():
    pool = rows([[1.0, "a"], [2.0, "b"]], labels=[0, 1])
    assert without_query(pool, rows([[1.0, "a"], [2.0, "b"]], labels=[1, 1])).index.tolist() == [0]


def test_without_query_compares_a_text_column_by_its_text_and_a_number_as_float64_text():
    """Text ``"3"`` is not the number 3.0, whose text is ``"3.0"``: a column of text in one table and of numbers in
    the other compares the text with the number's float64 text (``ema.inputs.cells_as_text``)."""
    pool = rows([[1.0, "3"], [1.0, "3.0"], [1.0, "nan"], [1.0, "x"]])
    numbers = ArraySet(
        "numbers", np.array([[1.0, 3.0], [1.0, np.nan]]), np.zeros(2, np.int64), np.arange(2), pool.features
    )
    assert without_query(pool, numbers).index.tolist() == [0, 3]
    assert contains_all(numbers, pool).tolist() == [False, True, True, False]
    assert without_query(pool, rows([[1, "3.0"], [1, 3.0]], name="q")).index.tolist() == [0, 2, 3]  # text both sides


def test_without_query_cuts_a_table_with_text_to_the_numbers_of_another():
    """A pool whose text column the query lacks is compared in the numbers both hold, ints or floats alike."""
    pool = rows([[1, 2, "a"], [3, 4, "b"], [5, np.nan, "c"]])
    query = ArraySet("q", np.array([[3.0, 4.0], [5.0, np.nan]]), np.zeros(2, np.int64), np.arange(2), ("c0", "c1"))
    assert without_query(pool, query).index.tolist() == [0]


def kept_as_text(pool: ArraySet, query: ArraySet) -> np.ndarray:
    """The positions of ``pool`` that :func:`without_query` keeps, found as it did before it keyed numbers by their
    bytes: every cell as text (:func:`~ema.inputs.cells_as_text`), then the label."""
    texts = [cells_as_text(data.x) for data in (pool, query)]
    width = np.result_type(*texts)
    keys = [
        np.concatenate([t.astype(width).view(np.uint8).reshape(len(t), -1), d.y.view(np.uint8).reshape(len(t), -1)], 1)
        for t, d in zip(texts, (pool, query), strict=True)
    ]
    keys = [k.view(np.dtype((np.void, k.shape[1]))).ravel() for k in keys]
    return np.flatnonzero(~np.isin(keys[0], keys[1]))


NUMBERS = np.array([0, 3, 3.0, -0.0, 1.5, np.nan, -np.nan, None], dtype=object)
TEXTS = np.array(["a", "3", "3.0", "nan", "", 3.0], dtype=object)


def random_table(rng: np.random.Generator, n: int, text: np.ndarray, name: str) -> ArraySet:
    """``n`` rows of few distinct values (duplicates within and across tables), text in the ``text`` columns (its
    first row text, a later cell sometimes the float 3.0), labels 0 or 1."""
    x = np.where(text, rng.choice(TEXTS, size=(n, text.size)), rng.choice(NUMBERS, size=(n, text.size)))
    x[0, text] = "a"
    y = rng.integers(0, 2, size=n).astype(np.int64)
    return ArraySet(name, x, y, np.arange(n, dtype=np.int64), tuple(f"c{i}" for i in range(text.size)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(
    ("pool_text", "query_text"),
    [([0, 0, 1, 1], [0, 0, 1, 1]), ([0, 1, 1, 0], [0, 1, 0, 0]), ([0, 0, 0, 0], [1, 0, 0, 1]), ([1, 1], [1, 1])],
)
def test_without_query_keeps_the_rows_that_comparing_every_cell_as_text_kept(seed, pool_text, query_text):
    rng = np.random.default_rng(seed)
    pool = random_table(rng, 300, np.array(pool_text, dtype=bool), "pool")
    query = random_table(rng, 200, np.array(query_text, dtype=bool), "query")
    kept = without_query(pool, query).index
    assert 0 < len(kept) < len(pool)
    np.testing.assert_array_equal(kept, kept_as_text(pool, query))


def test_of_kind_takes_grey_images_with_or_without_a_channel_axis_and_refuses_colour():
    grey = images(4, 0)
    reference = Reference(grey, "default: 4 samples")
    with_axis = ArraySet("q", grey.x[..., None], grey.y, grey.index)
    assert of_kind(reference, with_axis, "the query") is reference
    assert len(without_query(grey, with_axis)) == 0  # the same samples, whatever the axis
    colour = ArraySet("c", np.repeat(grey.x[..., None], 3, axis=-1), grey.y, grey.index)
    with pytest.raises(InputError, match=r"query's kind \(image 28x28x3\), got default: 4 samples \(image 28x28\)"):
        of_kind(reference, colour, "the query")


def test_without_query_keeps_a_same_image_with_another_label():
    pool = images(3, 0)
    query = ArraySet("q", pool.x[:1], pool.y[:1] + 1, pool.index[:1])
    assert len(without_query(pool, query)) == 3


def test_member_reference_of_a_trained_target_is_its_other_folds(trained):
    _, outcome = trained
    target = resolve_target(outcome.version.uri)
    splits = target.splits()
    reference = member_reference(target, splits.query("M1"))
    assert len(reference.data) == len(splits.train) - len(splits.query("M1"))
    assert "training data of" in reference.description
    assert reference.description.endswith(
        f"{len(reference.data)} samples, {len(splits.query('M1'))} of the query's left out"
    )
    held_out = member_reference(target, splits.query("M6"))
    assert len(held_out.data) == len(splits.train)
    assert held_out.description.endswith(f"{len(splits.train)} samples, none the query's")  # nothing was left out
    assert nonmember_reference(target).data.fingerprint == splits.calibration.fingerprint


def test_member_reference_from_a_file_and_none_without_lineage(trained, tmp_path):
    _, outcome = trained
    target = resolve_target(outcome.version.uri)
    splits = target.splits()
    path = write_set(splits.query("M2"), tmp_path / "members.npz")
    from_file = member_reference(target, splits.query("M1"), str(path))
    np.testing.assert_array_equal(from_file.data.x, splits.query("M2").x)
    assert from_file.description == f"file {path}: {len(splits.query('M2'))} samples, none the query's"
    unregistered = dataclasses.replace(target, version=None)
    assert member_reference(unregistered, splits.query("M1")) is None


def test_member_reference_from_the_training_data_a_foreign_run_logged(trained, tmp_path):
    import mlflow

    from ema.tracking.registry import RegisteredVersion

    _, outcome = trained
    target = resolve_target(outcome.version.uri)
    splits = target.splits()
    path = write_set(splits.query("M3"), tmp_path / "their-training-data.npz")
    with mlflow.start_run() as run:
        dataset = mlflow.data.from_numpy(splits.query("M3").x, targets=splits.query("M3").y, source=str(path))
        mlflow.log_input(dataset, context="training")
    foreign = dataclasses.replace(
        target, version=RegisteredVersion("theirs", "1", run.info.run_id, {}), model_uri="models:/theirs/1"
    )
    reference = member_reference(foreign, splits.query("M6"))
    np.testing.assert_array_equal(reference.data.x, splits.query("M3").x)
    assert f"training dataset {path} logged by run {run.info.run_id}" in reference.description
    assert member_reference(foreign, splits.query("M3")) is None  # nothing left once the query is taken out


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["audit", "--method", "calibrated", "--reference", "{missing}"], "reference file (--reference)"),
        (["audit", "--method", "calibrated", "--members", "{missing}"], "members file (--members)"),
        (["audit", "--calibration-file", "{missing}"], "calibration file (--calibration-file)"),
        (["power", "--certify", "--margin", "0.5", "--reference", "{missing}"], "reference file (--reference)"),
        (["unlearn", "--method", "retrain", "--forget", "{missing}"], "forget file (--forget)"),
        (["unlearn", "--method", "retrain", "--forget", "M1", "--retain", "{missing}"], "retain file (--retain)"),
        (["audit", "--query-file", "{missing}"], "query file"),
    ],
)
def test_a_missing_set_file_is_named_by_the_option_that_gave_it(trained, tmp_path, command, expected):
    """Each file the user gives says which it is where it is missing: not "query file" for every one."""
    from click.testing import CliRunner

    from ema_cli.cli import main

    _, outcome = trained
    missing = str(tmp_path / "missing.npz")
    query = [] if "--query-file" in command or command[0] != "audit" else ["--query", "M1"]
    args = [*(word.format(missing=missing) for word in command), *query, "--model", outcome.version.uri]
    refused = CliRunner().invoke(main, [*args, *([] if command[0] == "power" else ["--no-progress"])])
    assert refused.exit_code == 3, refused.output
    assert refused.output.strip().splitlines()[-1] == f"Error: {expected} {missing} does not exist"


def test_check_disjoint_refuses_a_reference_that_is_mostly_members_and_warns_of_a_few(caplog):
    members = images(20, 0)

    def reference(n_members: int, description: str) -> Reference:
        """10 samples: the first ``n_members`` of the members, then samples never seen."""
        never_seen = images(10, 100)
        x = np.concatenate([members.x[:n_members], never_seen.x[n_members:]])
        y = np.concatenate([members.y[:n_members], never_seen.y[n_members:]])
        return Reference(ArraySet("r", x, y, np.arange(10)), description)

    known = Reference(members, "file members.npz")
    check_disjoint(known, reference(0, "file never-seen.npz"))  # nothing shared: silent
    assert not caplog.records
    with pytest.raises(InputError, match=r"got 5 of the 10 samples of the non-member reference \(file half.npz\)"):
        check_disjoint(known, reference(5, "file half.npz"))
    check_disjoint(known, reference(2, "file a-few.npz"))
    assert "2 of the 10 samples of the non-member reference (file a-few.npz) are in the member reference" in caplog.text


def test_a_training_fold_given_as_the_non_member_reference_is_refused(trained, tmp_path):
    """A fold of the lineage's training data as --reference was audited against itself on both sides (a generic
    "barely separate" warning, then inconclusive); it is now refused, naming the overlap, and for ema power too."""
    _, outcome = trained
    fold = str(write_set(resolve_target(outcome.version.uri).splits().query("M3"), tmp_path / "M3.npz"))
    for command in (["audit", "--query", "M1", "--method", "calibrated"], ["power"]):
        result = CliRunner().invoke(
            main, [*command, "--model", outcome.version.uri, "--reference", fold, "--no-progress"]
        )
        assert result.exit_code == 3, result.output
        assert "got 1000 of the 1000 samples of the non-member reference" in result.output, result.output
