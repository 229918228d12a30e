"""``text_tables``: scoring a table whose categories are text, against the same table with the categories as codes.

The rows are Breast Cancer's, tiled to 100,000 with seeded noise (1% of each column's spread),
with two categories beside the 29 other features: the tumour size from the mean radius
("small", "medium", "large") and a site drawn with a seed ("north", "south", "east", "west").
Each table goes to a user's Pipeline of its own kind, logged with a DataFrame signature: one
takes the categories as text (MLflow's ``string``), the other as whole numbers (``long``),
each one-hot encoded by a ``ColumnTransformer`` and then classified by a logistic regression.
Both are scored in-process through :class:`ema.oracle.PyfuncOracle` from the set
(``predict_proba`` of the ``ArraySet``: the table's text matched to the signature, batches
prepared as DataFrames), interleaved; the ratio is what text costs over codes, the encoder's own
work on strings included.
"""

from __future__ import annotations

import statistics

import numpy as np

from benchmarks._common import Config, interleaved, progress, row, spread, temporary_store

NAME = "text_tables"
N_ROWS = 100_000
SIZES = np.array(["small", "medium", "large"], dtype=object)
SITES = np.array(["north", "south", "east", "west"], dtype=object)


def _tables(n: int):
    """The two sets, text and codes, of the same ``n`` rows (names: the features, then ``size`` and ``site``)."""
    from sklearn.datasets import load_breast_cancer

    from ema.data.arrays import ArraySet

    data = load_breast_cancer()
    rng = np.random.default_rng(0)
    rows = rng.integers(0, len(data.target), n)
    numbers = data.data[rows, 1:] + rng.normal(0, 0.01, (n, 29)) * data.data[:, 1:].std(axis=0)
    size = np.digitize(data.data[rows, 0], [12.0, 16.0])
    site = rng.integers(0, len(SITES), n)
    features = (*map(str, data.feature_names[1:]), "size", "site")
    labels, index = data.target[rows].astype(np.int64), np.arange(n, dtype=np.int64)
    text = np.column_stack([numbers.astype(object), SIZES[size], SITES[site]])
    codes = np.column_stack([numbers, size, site])
    return ArraySet("text", text, labels, index, features), ArraySet("codes", codes, labels, index, features)


def _register(data, name: str) -> str:
    """A user's Pipeline (one-hot of the two categories, then a logistic regression) fitted on ``data``'s frame."""
    import mlflow
    import mlflow.sklearn
    import pandas as pd
    from mlflow.models import infer_signature
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    frame = pd.DataFrame(data.x, columns=list(data.features)).infer_objects()
    if data.name == "codes":
        frame = frame.astype({"size": np.int64, "site": np.int64})
    encode = ColumnTransformer([("categories", OneHotEncoder(), ["size", "site"])], remainder=StandardScaler())
    model = make_pipeline(encode, LogisticRegression(max_iter=500)).fit(frame.head(5_000), data.y[:5_000])
    with mlflow.start_run(run_name=f"bench text tables {name}"):
        info = mlflow.sklearn.log_model(
            model,
            name="model",
            signature=infer_signature(frame.head(5), model.predict_proba(frame.head(5))),
            pyfunc_predict_fn="predict_proba",
            registered_model_name=name,
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
        )
    return f"models:/{name}/{info.registered_model_version}"


def measure(config: Config, *, n_rows: int = N_ROWS) -> list[dict]:
    """One row: rows/s of a table with text categories against the same rows with integer codes."""
    from ema.oracle import PyfuncOracle

    text, codes = _tables(n_rows)
    with temporary_store(prefix="ema-bench-text-"):
        progress(f"text_tables: fitting and logging the two pipelines, {n_rows:,} rows each")
        oracles = {data.name: PyfuncOracle(_register(data, f"bench-{data.name}")) for data in (text, codes)}
        same = np.abs(oracles["text"].predict_proba(text.take(np.arange(500))) - oracles["codes"].predict_proba(
            codes.take(np.arange(500)))).max()  # fmt: skip
        repeats = 3
        progress(f"text_tables: scoring both, {repeats} interleaved repeats")
        times = interleaved({name: lambda n=name, d=data: oracles[n].predict_proba(d) for name, data in
                             (("text", text), ("codes", codes))}, repeats)  # fmt: skip
    text_rate, codes_rate = (n_rows / statistics.median(times[name]) for name in ("text", "codes"))
    return [
        row(
            NAME,
            f"pyfunc in-process, {n_rows:,} rows with 2 text categories (OneHotEncoder + logistic regression)",
            ours=text_rate,
            baseline=codes_rate,
            unit="rows/s",
            baseline_label="the same rows, categories as integer codes",
            ratio=text_rate / codes_rate,
            ratio_label="text / codes",
            repeats=repeats,
            note=(
                f"text {spread(times['text'])}, codes {spread(times['codes'])}; max |diff| of the two pipelines' "
                f"probabilities on 500 rows {same:.1e}"
            ),
        )
    ]
