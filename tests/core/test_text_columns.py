"""Tables with text columns: kept as text, sent as text where a model declares it, left out where it takes numbers."""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest

from ema.auditors.ema import EMAAuditor
from ema.data.arrays import ArraySet
from ema.data.corruption import noise_only
from ema.engines.batches import AuditBatch
from ema.errors import InputError
from ema.inputs import InputSpec, InputTransform, cells_as_text, prepare_inputs, text_columns
from ema.oracle import Oracle
from ema.oracle.wire_format import request_body
from ema.training.recipes import SklearnRecipe, TorchRecipe
from ema.training.spec import TrainSpec
from ema.workflows.references import contains_all, without_query

SITES = np.array(["north", "south", "east", "west"] * 5, dtype=object)
NUMBERS = np.random.default_rng(0).normal(size=(20, 2)).round(3)


def mixed(numbers: np.ndarray = NUMBERS, sites: np.ndarray = SITES) -> np.ndarray:
    """A table as a file with a text column holds it: two numbers and a site per row."""
    x = np.empty((len(numbers), 3), dtype=object)
    x[:, :2], x[:, 2] = numbers, sites
    return x


def table(x: np.ndarray, name: str = "q", labels: np.ndarray | None = None) -> ArraySet:
    labels = np.arange(len(x), dtype=np.int64) % 2 if labels is None else labels
    return ArraySet(name, x, labels, np.arange(len(x), dtype=np.int64), ("age", "dose", "site"))


#: A model declaring the site as text (MLflow's string) and its numbers as doubles.
TEXT_SPEC = InputSpec(dtype="float64", columns=("age", "dose", "site"), column_dtypes=("float64", "float64", "str"))


class Seen(Oracle):
    """Returns probabilities and keeps what it was handed, to check what a model receives."""

    paced = False  # one batch of up to 4,096 rows: what it was handed last is the whole set

    def _predict_batch(self, inputs):
        self.handed = inputs
        return np.full((len(inputs), 2), 0.5)


def test_a_table_with_text_is_a_table_whose_text_columns_are_known_and_fingerprinted_as_content():
    data = table(mixed())
    assert data.kind == "table" and text_columns(data.x).tolist() == [False, False, True]
    as_floats = table(mixed(NUMBERS.astype(object)))  # the same numbers, whatever type holds them
    ints = mixed(np.arange(40).reshape(20, 2))
    assert table(ints).fingerprint == table(mixed(np.arange(40.0).reshape(20, 2))).fingerprint
    assert as_floats.fingerprint == data.fingerprint
    assert table(mixed(sites=SITES[::-1])).fingerprint != data.fingerprint
    assert cells_as_text(ints)[1].tolist() == ["2.0", "3.0", "south"]


def test_a_model_declaring_text_gets_a_frame_of_text_and_numbers_of_the_declared_dtypes():
    frame = prepare_inputs(mixed(), InputTransform(), TEXT_SPEC)
    assert frame.dtypes.iloc[:2].tolist() == [np.float64, np.float64] and frame["site"].tolist() == SITES.tolist()
    assert pd.api.types.is_string_dtype(frame["site"])
    whole = InputSpec(dtype="float64", columns=("age", "dose", "site"), column_dtypes=("int64", "float64", "str"))
    with pytest.raises(InputError, match=r"whole numbers in column 'age' .* got values such as 0\.126"):
        prepare_inputs(mixed(), InputTransform(), whole)
    with pytest.raises(InputError, match=r"no input scaling for a table with text columns, got"):
        prepare_inputs(mixed(), InputTransform(scale=255.0), TEXT_SPEC)


def test_the_oracle_sends_text_where_declared_and_whole_numbers_as_their_text_on_record(caplog):
    oracle = Seen(input_spec=TEXT_SPEC, outputs="probabilities")
    oracle.predict(table(mixed()))
    assert oracle.handed["site"].tolist() == SITES.tolist() and "text" not in caplog.text
    codes = mixed(sites=np.arange(20) % 4)  # sites written as numbers, as a CSV reader reads "0".."3"
    with caplog.at_level(logging.WARNING):
        oracle.predict(table(codes))
    assert oracle.handed["site"].tolist() == [str(i % 4) for i in range(20)]
    assert "'site' hold numbers where the model's signature declares text: sent as their decimal text" in caplog.text
    oracle.predict(table(mixed(sites=np.array([0.5, 1e30, 2.0, -4.0] * 5))))  # a CSV's "0.5", "1e30", "2", "-4"
    assert oracle.handed["site"].tolist()[:4] == ["0.5", "1e+30", "2", "-4"]  # no int64 overflow
    oracle.predict(table(mixed(sites=np.full(20, 2**60))))  # an integer ID beyond what a float holds
    assert oracle.handed["site"].tolist()[0] == "1152921504606846976"


def test_a_missing_cell_goes_as_nan_to_a_double_column_never_as_text_nor_to_an_integer_one():
    """--allow-missing sends a missing number as NaN where the signature declares floats; a column declared text would
    get the word 'nan', and one declared long cannot hold it: both are refused by name."""
    numbers = NUMBERS.copy()
    numbers[4, 1] = np.nan
    oracle = Seen(input_spec=TEXT_SPEC, outputs="probabilities")
    oracle.predict(table(mixed(numbers)))
    assert np.isnan(oracle.handed["dose"][4]) and oracle.handed["dose"].dtype == np.float64
    codes = mixed(sites=np.array([0.0, 1.0, np.nan, 2.0] * 5))  # sites as numbers, one of them missing
    declared_text = r"column 'site' \(the model's signature declares text\), got 5 missing: a missing cell goes as NaN"
    with pytest.raises(InputError, match=declared_text):
        oracle.predict(table(codes))
    whole = InputSpec(dtype="float64", columns=("age", "dose", "site"), column_dtypes=("float64", "int64", "str"))
    with pytest.raises(InputError, match=r"every cell of column 'dose' \(the model's signature declares int64, which "
                                         r"holds no missing value\), got missing cells"):  # fmt: skip
        Seen(input_spec=whole, outputs="probabilities").predict(table(mixed(numbers)))


def test_the_oracle_refuses_text_in_a_column_declared_numbers_naming_the_first_word_and_its_row():
    spec = InputSpec(dtype="float64", columns=("age", "dose", "site"))
    x = mixed()
    x[:, 0] = x[:, 0].astype(str)
    x[3, 0] = "unknown"
    with pytest.raises(InputError, match=r"q: expected numbers in column 'age' \(the model's signature declares "
                                         r"float64\), got text such as 'unknown' \(data row 3"):  # fmt: skip
        Seen(input_spec=spec, outputs="probabilities").predict(table(x))


def test_a_model_naming_no_columns_gets_the_numbers_the_words_left_out_on_record(caplog):
    oracle = Seen(outputs="probabilities", input_spec=InputSpec((-1, 2), "float64"))
    with caplog.at_level(logging.WARNING):
        oracle.predict(table(mixed()))
    np.testing.assert_array_equal(oracle.handed, NUMBERS)
    assert "1 column(s) of text left out, as the model's signature names no columns (it takes numbers): 'site'" in (
        caplog.text
    )
    broken = mixed(sites=np.array(["1.5", "n/a"] * 10, dtype=object))  # numbers with a word: broken, not a category
    with pytest.raises(InputError, match=r"column 'site' \(the model, whose .* got 10 cell\(s\) of text among them, "
                                         r"such as 'n/a' \(data row 1"):  # fmt: skip
        oracle.predict(table(broken))


def test_a_json_request_writes_text_as_json_strings():
    frame = prepare_inputs(mixed(sites=np.array(['say "hi"', "é"] * 10, dtype=object)), InputTransform(), TEXT_SPEC)
    sent = json.loads(request_body(frame))["dataframe_split"]
    assert sent["columns"] == ["age", "dose", "site"] and sent["data"][0] == [*NUMBERS[0].tolist(), 'say "hi"']


def test_calibration_noise_leaves_the_text_as_it_is_and_the_numbers_as_a_table_of_numbers_gets_them():
    data = table(mixed())
    noisy = noise_only(data, 50, seed=1)
    assert noisy.x[:, 2].tolist() == SITES.tolist()
    numbers = ArraySet("q", NUMBERS, data.y, data.index, ("age", "dose"))
    np.testing.assert_array_equal(noisy.x[:, :2].astype(np.float64), noise_only(numbers, 50, seed=1).x)


def test_our_recipes_train_on_the_numbers_and_a_network_refuses_text():
    labels = np.arange(20) % 2
    recipe = SklearnRecipe("LogisticRegression")
    classifier = recipe.fit(mixed(), labels, progress=False, columns=("age", "dose", "site"))
    assert classifier.columns == ("age", "dose") and classifier.predict_proba(mixed()).shape == (20, 2)
    unnamed = recipe.fit(mixed(), labels, progress=False)  # no names: the text column found by its cells
    np.testing.assert_array_equal(unnamed.predict_proba(mixed()), classifier.predict_proba(mixed()))
    broken = mixed(sites=np.array(["1.5", "n/a"] * 10, dtype=object))
    with pytest.raises(InputError, match=r"column 'at position 2' \(LogisticRegression takes numbers\)"):
        recipe.fit(broken, labels, progress=False)
    with pytest.raises(InputError, match=r"numbers for a torch recipe \(mlp\), got a table with text columns '2'"):
        TorchRecipe(TrainSpec(arch="mlp", epochs=1)).fit(mixed(), labels, progress=False)


def test_a_reference_drops_the_query_rows_whatever_type_holds_their_numbers():
    query = table(mixed(np.arange(40).reshape(20, 2)))
    pool = table(mixed(np.arange(40.0).reshape(20, 2)).take(np.arange(10, 30) % 20, axis=0), "pool")
    assert contains_all(pool, query).all()
    assert len(without_query(pool, query.take(np.arange(5)))) == 15
    # a forget file's extra column beside a training file's: compared in the columns both hold
    ids = np.array([f"P{i}" for i in range(20)], dtype=object)
    wider = ArraySet("wider", np.column_stack([ids, query.x]), query.y, query.index, ("id", "age", "dose", "site"))
    assert contains_all(pool, wider).all() and len(without_query(pool, wider.take(np.arange(5)))) == 15
    other = ArraySet("other", query.x, query.y, query.index, ("age", "dose", "ward"))
    with pytest.raises(InputError, match=r"set other: expected inputs like the query's .* \(missing 'site'; extra "
                                         r"'ward'\)"):  # fmt: skip
        without_query(pool, other)


def test_a_spark_batch_of_a_table_with_text_is_matched_to_the_declared_columns():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 400)
    auditor = EMAAuditor().calibrate(rng.dirichlet([1, 0.1], 400), labels, rng.dirichlet([1, 1], 400), labels)
    oracle = Seen(input_spec=TEXT_SPEC, outputs="probabilities")
    frame = pd.DataFrame({"index": np.arange(20), "label": np.arange(20) % 2, "age": NUMBERS[:, 0],
                          "dose": NUMBERS[:, 1], "site": np.arange(20) % 4})  # fmt: skip
    batch = AuditBatch(lambda: oracle, auditor, 2, features=("age", "dose", "site"))
    (flagged,) = batch(iter([frame]))
    assert len(flagged) == 20 and oracle.handed["site"].tolist() == [str(i % 4) for i in range(20)]


def test_input_spec_describe_counts_each_dtype_of_mixed_columns():
    """A signature of 30 float64 and 2 text columns was described as "32 float64 columns"."""
    columns = tuple(f"x{i}" for i in range(32))
    kinds = ("float64",) * 15 + ("str", "str") + ("float64",) * 15
    mixed = InputSpec(dtype="float64", columns=columns, column_dtypes=kinds)
    assert mixed.describe() == "32 columns (x0, ...) of 30 float64 and 2 text"
    assert InputSpec(dtype="float64", columns=columns).describe() == "32 float64 columns (x0, ...)"
    assert InputSpec(dtype="str", columns=columns[:2], column_dtypes=("str", "str")).describe() == (
        "2 text columns (x0, ...)"
    )
