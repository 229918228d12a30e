"""Finding runs: plain records of what earlier runs logged, for resuming grids and reading histories."""

from __future__ import annotations

from dataclasses import dataclass

from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.tracking import keys

#: Runs asked of the store per page.
PAGE_SIZE = 1000


@dataclass(frozen=True)
class RunRecord:
    """What a run logged: its id, params, latest metrics and tags."""

    run_id: str
    params: dict[str, str]
    metrics: dict[str, float]
    tags: dict[str, str]


def quoted(name: str, value: str) -> str:
    """``value`` as a search-filter string literal; refuses a quote, which would break the filter."""
    if "'" in value:
        raise InputError(f"expected {name} without single quotes, got {value!r}")
    return f"'{value}'"


def search_runs(experiment_id: str, filter_string: str) -> list[RunRecord]:
    """Every run of the experiment that matches ``filter_string``, oldest first."""
    client, runs, token = MlflowClient(), [], None
    while True:
        page = client.search_runs(
            [experiment_id],
            filter_string=filter_string,
            max_results=PAGE_SIZE,
            page_token=token,
            order_by=["attributes.start_time ASC"],
        )
        runs.extend(RunRecord(r.info.run_id, r.data.params, r.data.metrics, r.data.tags) for r in page)
        token = page.token
        if not token:
            return runs


def finished_children(experiment_id: str, parent_id: str) -> list[RunRecord]:
    """The FINISHED runs nested under ``parent_id``."""
    parent = quoted("run id", parent_id)
    return search_runs(experiment_id, f"tags.`{keys.TAG_PARENT_RUN}` = {parent} and attributes.status = 'FINISHED'")


def runs_tagged(experiment_id: str, tag: str, value: str) -> list[RunRecord]:
    """The runs whose tag ``tag`` equals ``value``."""
    return search_runs(experiment_id, f"tags.`{tag}` = {quoted(tag, value)}")
