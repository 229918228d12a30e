"""Models of other kinds behind a real `mlflow models serve` on 127.0.0.1: the probabilities over HTTP, with JSON and
Parquet bodies, are those scored in-process.

A user's scikit-learn RandomForest on a table of double and integer columns (a DataFrame
signature: MLflow's schema enforcement wants integers in its ``long`` column), and a user's torch
CNN on RGB 32x32 images (signature (-1, 3, 32, 32)), queried with (n, 32, 32, 3) uint8 images.
"""

from __future__ import annotations

import numpy as np
import pytest

from ema.oracle import HttpOracle, PyfuncOracle
from ema.oracle.model_info import declared_input_spec
from tests.conftest import module_store
from tests.engines.test_query_kinds import log_forest, tabular_sets
from tests.foreign.test_colour_images import noise_set, train_and_log
from tests.workflows.test_serving import free_port, serve, stop

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["tabular", "colour"])
def served(request, tmp_path_factory, template_db):
    """(model URI, URL, query set, output kind): the kind's model, registered and served."""
    with module_store(tmp_path_factory, template_db, request.param):
        if request.param == "tabular":
            sets = tabular_sets()
            uri = log_forest(sets["members"], "served-forest")
        else:
            sets = {"members": noise_set("members", 0), "held_out": noise_set("held_out", 1)}
            uri = train_and_log(sets["members"], "served-cnn")
        port = free_port()
        process = serve(uri, port)
        try:
            outputs = "probabilities" if request.param == "tabular" else "logits"
            yield uri, f"http://127.0.0.1:{port}/invocations", sets["held_out"], outputs
        finally:
            stop(process)


@pytest.mark.parametrize("request_format", ["json", "parquet"])
def test_served_model_of_another_kind_gives_the_in_process_probabilities(served, request_format):
    uri, url, query, outputs = served
    options = {"batch_size": 32, "outputs": outputs}  # the same batches: kernels may sum in another order for others
    spec = declared_input_spec(uri)
    over_http = HttpOracle(url, request_format=request_format, input_spec=spec, **options).predict_proba(query)
    in_process = PyfuncOracle(uri, **options).predict_proba(query)
    np.testing.assert_array_equal(over_http, in_process)
    if query.kind == "table":  # a server with no registry entry: the columns go by the file's names
        unknown = HttpOracle(url, request_format=request_format, table_names=True, **options)
        np.testing.assert_array_equal(unknown.predict_proba(query), in_process)
