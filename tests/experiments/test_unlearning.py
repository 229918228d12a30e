"""`ema grid unlearning`: its configuration, its tables from known frames, and one small grid end to end."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.experiments.unlearning import UnlearningGridConfig, run_unlearning_grid
from ema.experiments.unlearning_tables import (
    detected_from,
    render_tables,
    summarise_traces,
    trace_figure,
    verdict_table,
)
from ema.tracking import keys
from ema_cli.cli import main


def test_config_puts_retrain_first_and_refuses_bad_choices():
    assert UnlearningGridConfig(methods=("scrub",)).validate().methods == ("retrain", "scrub")
    with pytest.raises(InputError, match="expected unlearning method in"):
        UnlearningGridConfig(methods=("delete",)).validate()
    with pytest.raises(InputError, match=r"expected forget set in \('M1'"):
        UnlearningGridConfig(forget="M6").validate()
    with pytest.raises(InputError, match="expected retained fold in"):
        UnlearningGridConfig(forget="M2", retained="M2").validate()
    with pytest.raises(InputError, match="expected distinct non-negative seeds"):
        UnlearningGridConfig(seeds=(0, 0)).validate()
    with pytest.raises(InputError, match="expected either --model .* or --epochs and --data, got both"):
        UnlearningGridConfig(model_uri="models:/t/1", data="fashion").validate()


def _traces(rates: dict[tuple[str, int], tuple[int, int]], draws: int = 10) -> pd.DataFrame:
    """Trace draws where (method, size) has the given numbers of retention and over-unlearning detections."""
    rows = []
    for (method, size), (retained, over) in rates.items():
        rows += [
            {
                "method": method,
                "seed": 0,
                "size": size,
                "draw": d,
                "retention": d < retained,
                "over-unlearning": d < over,
            }
            for d in range(draws)
        ]
    return pd.DataFrame(rows)


def test_detected_from_is_the_smallest_size_from_which_on_every_size_detects():
    summary = summarise_traces(
        _traces(
            {
                ("finetune", 20): (9, 0),
                ("finetune", 50): (5, 0),
                ("finetune", 200): (10, 0),
                ("neggrad", 20): (0, 3),
                ("neggrad", 50): (0, 9),
                ("neggrad", 200): (0, 10),
                ("retrain", 20): (1, 0),
                ("retrain", 50): (0, 1),
                ("retrain", 200): (1, 0),
            }
        )
    )
    assert detected_from(summary) == {"finetune": 200, "neggrad": 50, "retrain": None}
    assert summary.set_index(["method", "size"]).loc[("neggrad", 50), "over-unlearning"] == 0.9


def test_verdict_table_tallies_each_set_and_auditor_over_seeds():
    audits = pd.DataFrame(
        [
            {"method": "retrain", "seed": s, "set": "forget", "auditor": "calibrated", "verdict": v}
            for s, v in enumerate(["not_memorized", "inconclusive", "not_memorized"])
        ]
    )
    table = verdict_table(audits)
    assert table.loc[0, "method"] == "retrain"
    assert table.loc[0, "forget · calibrated"] == "nm 2, inc 1"


def test_tables_render_as_markdown_with_one_cell_per_column_and_a_figure():
    versions = pd.DataFrame(
        [
            {"method": m, "seed": 0, "version": str(i), "retain_accuracy": 1.0, "forget_accuracy": 0.9}
            | {"test_accuracy": 0.9, "unlearn_seconds": 1.0}
            for i, m in enumerate(["retrain", "finetune"])
        ]
    )
    audits = pd.DataFrame(
        [
            {"method": m, "seed": 0, "set": s, "auditor": a, "verdict": "memorized", "value": 0.01}
            | {"p_too_forgotten": 0.99, "retained_ci_high": 1.0}
            for m in ("retrain", "finetune")
            for s in ("forget", "retained", "held-out")
            for a in ("ema", "ks-ratio", "calibrated")
        ]
    )
    traces = _traces({("retrain", 20): (1, 0), ("finetune", 20): (10, 0)})
    tables = render_tables(versions, audits, traces, config=UnlearningGridConfig(), title="t", wall_seconds=3.0)
    tables_md = [block.splitlines() for block in tables.markdown.split("\n\n") if block.startswith("|")]
    assert len(tables_md) == 4
    for rows in tables_md:
        assert {row.count("|") for row in rows} == {rows[0].count("|")}  # no stray "|" inside a cell
    assert tables_md[3][-1].split("|")[2].strip() == "r 1.00 / o 0.00"
    assert tables_md[3][-1].split("|")[-2].strip() == "n = 20"
    assert "<table>" in tables.html_page and "Traces on forget-set subsets" in tables.html_fragment
    assert trace_figure(summarise_traces(traces), alpha=0.1).startswith(b"\x89PNG")


def test_cli_grid_unlearning_refuses_options_it_does_not_read(store):
    result = CliRunner().invoke(main, ["grid", "unlearning", "--k", "100"])
    assert result.exit_code != 0
    assert "grid 'unlearning' does not use --k; leave them out" in result.output
    assert CliRunner().invoke(main, ["grid", "benchmark", "--methods", "scrub"]).exit_code != 0


@pytest.mark.slow
def test_a_small_unlearning_grid_unlearns_audits_and_logs_its_tables(store):
    from ema.tracking.runs import configure

    configure()
    config = UnlearningGridConfig(methods=("finetune",), seeds=(0,), sizes=(20,), n_draws=2, epochs=2)
    outcome = run_unlearning_grid(config, progress=False)
    assert list(outcome.versions["method"]) == ["none (before)", "retrain", "finetune"]
    assert len(outcome.audits) == 3 * 3 * 3  # versions x query sets x auditors
    assert set(outcome.audits["auditor"]) == {"ema", "ks-ratio", "calibrated"}
    assert len(outcome.traces) == 3 * 2
    client = MlflowClient()
    artifacts = {a.path for a in client.list_artifacts(outcome.run_id)}
    assert {keys.ARTIFACT_TABLES_MD, keys.ARTIFACT_REPORT, keys.ARTIFACT_TRACES_PNG, keys.ARTIFACT_CELLS} <= artifacts
    children = client.search_runs(
        [client.get_run(outcome.run_id).info.experiment_id], f"tags.`mlflow.parentRunId` = '{outcome.run_id}'"
    )
    names = [run.data.tags[keys.TAG_RUN_NAME] for run in children]
    assert sum(name.startswith("unlearn ") for name in names) == 2
    assert sum(run.data.tags.get(keys.TAG_RUN_KIND) == keys.RUN_KIND_AUDIT for run in children) == 3 * 3 * 2
    retrained = outcome.audits[(outcome.audits["method"] == "retrain") & (outcome.audits["set"] == "forget")]
    member_tags = client.get_run(retrained["run_id"].iloc[-1]).data.tags[keys.TAG_MEMBER_REFERENCE]
    assert "minus the forget set M1" in member_tags
    assert "## Traces on forget-set subsets" in outcome.markdown
