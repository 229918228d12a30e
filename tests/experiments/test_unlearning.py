"""`ema grid unlearning`: its configuration, its tables from known frames, and one small grid end to end."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.experiments.unlearning.runner import REDRAWS_CSV, UnlearningGridConfig, run_unlearning_grid
from ema.experiments.unlearning.tables import (
    detected_from,
    redraw_table,
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
    with pytest.raises(
        InputError, match=r"expected either --model .* got both: --model models:/t/1 with --data fashion"
    ):
        UnlearningGridConfig(model_uri="models:/t/1", data="fashion").validate()


def test_config_refuses_a_bad_margin_and_repeated_or_negative_reference_seeds():
    assert UnlearningGridConfig(margin="auto", reference_seeds=(2, 0)).validate().reference_seeds == (2, 0)
    with pytest.raises(InputError, match=r"expected margin in \(0, 1\), got 1.5"):
        UnlearningGridConfig(margin=1.5).validate()
    for seeds in ((1, 1), (0, -1)):
        with pytest.raises(InputError, match=r"expected distinct non-negative reference seeds \(--reference-seeds\)"):
            UnlearningGridConfig(reference_seeds=seeds).validate()


def test_cli_grid_unlearning_refuses_a_margin_outside_the_unit_interval(store):
    result = CliRunner().invoke(main, ["grid", "unlearning", "--margin", "1", "--no-progress"])
    assert result.exit_code == 2
    assert "expected a retained share in (0, 1) or 'auto', got '1'" in result.output
    assert not MlflowClient().search_runs([e.experiment_id for e in MlflowClient().search_experiments()])


def _redraws(verdicts: dict[tuple[str, int, int], tuple[str, str, float]]) -> pd.DataFrame:
    """Redrawn-reference rows: (method, seed, reference seed) -> (verdict, verdict at auto, certifiable margin)."""
    return pd.DataFrame(
        [
            {"method": m, "seed": s, "reference_seed": r, "verdict": v, "verdict_auto": a}
            | {"p_removed": 0.5, "retained_upper_bound": 0.2, "certifiable_margin": c, "information": 0.1}
            | {"information_lower": 0.08}
            | {"n_query": 1000.0, "n_reference": 1000}
            for (m, s, r), (v, a, c) in verdicts.items()
        ]
    )


def test_redraw_table_counts_verdicts_over_seed_and_reference_pairs():
    redraws = _redraws(
        {
            ("retrain", 0, 0): ("memorized", "memorized", 0.30),
            ("retrain", 0, 1): ("inconclusive", "not_memorized", 0.25),
            ("retrain", 1, 0): ("not_memorized", "not_memorized", 0.35),
            ("retrain", 1, 1): ("inconclusive", "inconclusive", 0.28),
        }
    )
    row = redraw_table(redraws, margin=0.1).iloc[0]
    assert (row["pairs"], row["memorized"], row["not_memorized (margin 0.1)"]) == (4, "1 / 4", "1 / 4")
    assert row["not_memorized (margin auto)"] == "2 / 4"
    assert row["certifiable margin"] == "0.250 - 0.350"
    assert (row["query size"], row["reference"]) == (1000, 1000)
    at_auto = redraw_table(redraws, margin="auto")  # the grid's margin is auto: no second auto column
    assert [c for c in at_auto.columns if c.startswith("not_memorized")] == ["not_memorized (margin auto)"]


def test_tables_show_the_redrawn_reference_table_only_with_redraws():
    frames = _small_frames()
    config = UnlearningGridConfig(reference_seeds=(0, 1))
    redraws = _redraws({("retrain", 0, r): ("inconclusive", "not_memorized", 0.3) for r in (0, 1)})
    with_redraws = render_tables(*frames, redraws=redraws, config=config, title="t", wall_seconds=1.0)
    assert "## Forget set against redrawn references" in with_redraws.markdown
    tables_md = [block.splitlines() for block in with_redraws.markdown.split("\n\n") if block.startswith("|")]
    assert len(tables_md) == 5
    assert {row.count("|") for row in tables_md[4]} == {tables_md[4][0].count("|")}  # no stray "|" inside a cell
    assert "reference seed (0, 1)" in with_redraws.markdown
    without = render_tables(*frames, config=UnlearningGridConfig(), title="t", wall_seconds=1.0)
    assert "redrawn references" not in without.markdown


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


def _small_frames() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Versions, audits and traces of a grid of retrain and finetune, one seed each."""
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
    return versions, audits, _traces({("retrain", 20): (1, 0), ("finetune", 20): (10, 0)})


def test_tables_render_as_markdown_with_one_cell_per_column_and_a_figure():
    versions, audits, traces = _small_frames()
    tables = render_tables(versions, audits, traces, config=UnlearningGridConfig(), title="t", wall_seconds=3.0)
    tables_md = [block.splitlines() for block in tables.markdown.split("\n\n") if block.startswith("|")]
    assert len(tables_md) == 4
    for rows in tables_md:
        assert {row.count("|") for row in rows} == {rows[0].count("|")}  # no stray "|" inside a cell
    assert tables_md[3][-1].split("|")[2].strip() == "r 1.00 / o 0.00"
    assert tables_md[3][-1].split("|")[-2].strip() == "n = 20"
    assert "<table>" in tables.html_page and "Traces on forget-set subsets" in tables.html_fragment
    assert trace_figure(summarise_traces(traces), alpha=0.1).startswith(b"\x89PNG")


#: What `ema grid unlearning` reads, each given a value unlike its default, and where it lands in the config.
READ_OPTIONS = {
    "methods": (["--methods", "finetune,scrub"], ("methods", ("retrain", "finetune", "scrub"))),
    "seeds": (["--seeds", "4,5"], ("seeds", (4, 5))),
    "sizes": (["--sizes", "30,60"], ("sizes", (30, 60))),
    "n_draws": (["--draws", "3"], ("n_draws", 3)),
    "epochs": (["--epochs", "7"], ("epochs", 7)),
    "data_name": (["--data", "fashion"], ("data", "fashion")),
    "root": (["--root", "."], ("data_root", ".")),
    "data_seed": (["--data-seed", "2"], ("data_seed", 2)),
    "cal_seed": (["--cal-seed", "3"], ("cal_seed", 3)),
    "alpha": (["--alpha", "0.05"], ("alpha", 0.05)),
    "sample_seed": (["--sample-seed", "9"], ("sample_seed", 9)),
    "margin": (["--margin", "auto"], ("margin", "auto")),
    "reference_seeds": (["--reference-seeds", "3,1"], ("reference_seeds", (3, 1))),
}
#: Options of the other studies: `ema grid unlearning` does not have them.
OTHER_STUDIES = {
    "ks": ["--k", "60"],
    "queries": ["--queries", "M1"],
    "workers": ["--workers", "2"],
    "n_ks_draws": ["--ks-draws", "3"],
}
BOTH = "expected either --model (its recipe and data come from its version tags) or --epochs, --data, --root and "
#: The options of the grid's own target, refused with --model, and what the line says.
REFUSED_WITH_MODEL = {
    "data_seed": (["--data-seed", "3"], BOTH + "--data-seed, got both: --model models:/t/1 with --data-seed 3"),
    "root": (["--root", "/data"], BOTH + "--data-seed, got both: --model models:/t/1 with --root /data"),
    "data_name": (
        ["--data", "fashion", "--epochs", "4"],
        BOTH + "--data-seed, got both: --model models:/t/1 with --epochs 4, --data fashion",
    ),
}


class _Stop(Exception):
    """Raised by the stand-in grid: the config arrived, nothing runs."""


def _config_given(monkeypatch, *options: str) -> UnlearningGridConfig:
    """The config `ema grid unlearning OPTIONS` hands to the grid (which then does not run)."""
    import ema.experiments.unlearning.runner as grid_module

    seen = []

    def record(config, progress):
        seen.append(config)
        raise _Stop

    monkeypatch.setattr(grid_module, "run_unlearning_grid", record)
    result = CliRunner().invoke(main, ["grid", "unlearning", *options, "--no-progress"])
    assert isinstance(result.exception, _Stop), result.output
    return seen[0]


def test_cli_grid_unlearning_hands_every_option_it_reads_to_the_grid(store, monkeypatch):
    from ema_cli.grid import unlearning

    options = [word for words, _ in READ_OPTIONS.values() for word in words]
    config = _config_given(monkeypatch, *options).validate()
    for words, (field, value) in READ_OPTIONS.values():
        assert getattr(config, field) == value, (words, getattr(config, field))
    model = _config_given(monkeypatch, "--model", "models:/t/1")
    assert model.model_uri == "models:/t/1" and model.data_seed is None and model.validate()
    # the command has only the options it reads: none is accepted and ignored
    # every command's, read by workflow_command; --max-params bounds every model the grid trains (ema.limits)
    shared = {"progress", "experiment_name", "verbose", "max_params"}
    marks = {"mark_key", "mark_queries"}  # with --model only: tests/experiments/test_unlearning_marks.py
    assert {param.name for param in unlearning.params} == {"model_uri", *shared, *marks, *READ_OPTIONS}


@pytest.mark.parametrize("options", OTHER_STUDIES.values(), ids=list(OTHER_STUDIES))
def test_cli_grid_unlearning_has_no_option_of_another_study(store, options):
    result = CliRunner().invoke(main, ["grid", "unlearning", *options, "--no-progress"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].startswith(f"Error: No such option '{options[0]}'")
    assert CliRunner().invoke(main, ["grid", "paper", "--methods", "scrub"]).exit_code == 2
    assert not MlflowClient().search_runs([e.experiment_id for e in MlflowClient().search_experiments()])


@pytest.mark.parametrize("options, line", REFUSED_WITH_MODEL.values(), ids=list(REFUSED_WITH_MODEL))
def test_cli_grid_unlearning_with_model_refuses_the_options_of_its_own_target(store, options, line):
    result = CliRunner().invoke(main, ["grid", "unlearning", "--model", "models:/t/1", *options, "--no-progress"])
    assert result.exit_code == 3  # a refused input
    assert result.output.strip().splitlines()[-1] == f"Error: {line}"
    assert not MlflowClient().search_runs([e.experiment_id for e in MlflowClient().search_experiments()])


def test_config_refuses_model_with_own_target_options_and_repeated_methods():
    for extra, shown in (({"data_seed": 0}, "--data-seed 0"), ({"data_root": "/d"}, "--root /d")):
        with pytest.raises(InputError, match=f"got both: --model models:/t/1 with {shown}"):
            UnlearningGridConfig(model_uri="models:/t/1", **extra).validate()
    with pytest.raises(InputError, match=r"expected distinct unlearning methods, got \('scrub', 'scrub'\)"):
        UnlearningGridConfig(methods=("scrub", "scrub")).validate()


def test_grid_refuses_trace_sizes_beyond_the_forget_set_before_training(store):
    from ema.tracking.runs import configure

    configure()
    with pytest.raises(InputError, match=r"sizes \(--sizes\) of at most 1000, .* M1 of mnist-embedded, got 1500"):
        run_unlearning_grid(UnlearningGridConfig(sizes=(20, 1500)), progress=False)
    client = MlflowClient()
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [run.info.status for run in runs] == ["FAILED"]
    assert not client.search_registered_models()  # nothing trained


@pytest.mark.slow
def test_a_small_unlearning_grid_unlearns_audits_and_logs_its_tables(store):
    from ema.tracking.runs import configure

    configure()
    config = UnlearningGridConfig(
        methods=("finetune",), seeds=(0,), sizes=(20,), n_draws=2, epochs=2, margin="auto", reference_seeds=(0,)
    )
    outcome = run_unlearning_grid(config, progress=False)
    assert list(outcome.versions["method"]) == ["none (before)", "retrain", "finetune"]
    assert len(outcome.audits) == 3 * 3 * 3  # versions x query sets x auditors
    assert set(outcome.audits["auditor"]) == {"ema", "ks-ratio", "calibrated"}
    assert len(outcome.traces) == 3 * 2
    assert len(outcome.redraws) == 3 and outcome.redraws["reference"].nunique() == 1  # versions x reference seeds
    client = MlflowClient()
    artifacts = {a.path for a in client.list_artifacts(outcome.run_id)}
    assert {keys.ARTIFACT_TABLES_MD, keys.ARTIFACT_REPORT, keys.ARTIFACT_TRACES_PNG, keys.ARTIFACT_CELLS} <= artifacts
    assert REDRAWS_CSV in artifacts and client.get_run(outcome.run_id).data.params[keys.PARAM_MARGIN] == "auto"
    margins = {
        auditor: {client.get_run(run_id).data.params[keys.PARAM_MARGIN] for run_id in rows["run_id"]}
        for auditor, rows in outcome.audits.groupby("auditor")
    }
    # the calibrated audits certified at the grid's margin; EMA and the KS ratio (one run) certify none
    assert margins == {"calibrated": {"auto"}, "ema": {""}, "ks-ratio": {""}}
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
    assert "## Forget set against redrawn references" in outcome.markdown
    assert outcome.n_reused == 0

    again = run_unlearning_grid(config, progress=False)  # the unlearned versions come from the registry
    assert again.n_reused == 2 and client.get_run(again.run_id).data.metrics[keys.METRIC_N_REUSED] == 2
    pd.testing.assert_frame_equal(again.versions, outcome.versions)  # same versions, same recorded numbers
    pd.testing.assert_frame_equal(again.audits.drop(columns="run_id"), outcome.audits.drop(columns="run_id"))
    pd.testing.assert_frame_equal(again.traces, outcome.traces)
    pd.testing.assert_frame_equal(again.redraws, outcome.redraws)
    assert not set(again.audits["run_id"]) & set(outcome.audits["run_id"])  # audited again, in runs of its own
    children = client.search_runs(
        [client.get_run(again.run_id).info.experiment_id], f"tags.`mlflow.parentRunId` = '{again.run_id}'"
    )
    assert not [run for run in children if run.data.tags[keys.TAG_RUN_NAME].startswith("unlearn ")]


@pytest.mark.slow
def test_cli_grid_unlearning_reuses_the_version_ema_unlearn_made_and_tags_what_it_audited(store):
    """`ema unlearn` then `ema grid unlearning` with the same source, method and seed: one version, not two;
    the grid tags the target and every version it audited with ``ema.last_grid.unlearning`` (its parent run).
    """
    import json

    from ema.tracking.runs import configure
    from ema.training.spec import TrainSpec
    from ema.workflows.train import train_target

    configure()  # this store's experiment: an earlier test's may still be the process's active one
    source = train_target(TrainSpec(epochs=3), progress=False).version
    made = CliRunner().invoke(main, ["unlearn", "--model", source.uri, "--forget", "M1", "--method", "finetune"])
    assert made.exit_code == 0, made.output
    client = MlflowClient()

    def versions() -> dict:
        return {str(v.version): v for v in client.search_model_versions(f"name = '{source.name}'")}

    assert len(versions()) == 2  # the source and the version ema unlearn made

    options = ["--model", source.uri, "--methods", "finetune", "--seeds", "0", "--sizes", "20", "--draws", "1"]
    result = CliRunner().invoke(main, ["grid", "unlearning", *options, "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "unlearned versions (1 reused)" in result.output  # finetune came from the registry; retrain was made
    after = versions()
    assert len(after) == 3  # the source, finetune (by ema unlearn) and retrain (by the grid): no duplicate
    parent = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], f"tags.`{keys.TAG_GRID}` = 'unlearning'"
    )
    tag = f"{keys.TAG_LAST_GRID_PREFIX}unlearning"
    records = {number: json.loads(version.tags[tag]) for number, version in after.items()}
    assert {record["run_id"] for record in records.values()} == {run.info.run_id for run in parent}
    assert len(parent) == 1 and all(record["n_cells"] > 0 for record in records.values())


def test_audits_against_redrawn_references_give_one_verdict_per_pair_at_margin_auto(store, one_thread):
    """On a tiny target and its retraining without M1: one forget-set verdict per (version, reference seed), each at
    its own certifiable margin, each reference seed one draw on every version, and different draws differ."""
    from ema.auditors.reference_record import decide_reference_verdict
    from ema.experiments.unlearning.runner import BEFORE, Version, audit_against_redrawn_references
    from ema.stats.certify import certifiable_margin
    from ema.tracking.runs import configure
    from ema.training.spec import TrainSpec
    from ema.training.unlearn_spec import UnlearnSpec
    from ema.workflows.target import resolve_target
    from ema.workflows.train import train_target
    from ema.workflows.unlearn import UnlearnConfig, unlearn

    configure()
    source = train_target(TrainSpec(hidden=(16,), epochs=3), progress=False).version
    spec = UnlearnSpec(method="retrain", epochs=3, seed=0)
    retrained = unlearn(UnlearnConfig(model_uri=source.uri, forget="M1", spec=spec), progress=False).version
    config = UnlearningGridConfig(margin="auto", reference_seeds=(0, 1))
    rows = []
    for entry in (Version(BEFORE, None, source, {}), Version("retrain", 0, retrained, {})):
        target = resolve_target(entry.version.uri)
        rows += audit_against_redrawn_references(config, entry, target, target.oracle())
    redraws = pd.DataFrame(rows)
    assert list(zip(redraws["method"], redraws["reference_seed"], strict=True)) == [
        (m, r) for m in (BEFORE, "retrain") for r in (0, 1)
    ]
    assert set(redraws["n_query"]) == {1000} and set(redraws["n_reference"]) == {1000}  # M1; the calibration set's size
    # each reference seed is one draw, the same on both versions; the two draws differ, and so do their outcomes
    assert redraws.groupby("reference_seed")["reference"].nunique().eq(1).all()
    assert redraws["reference"].nunique() == 2
    retrain = redraws[redraws["method"] == "retrain"]
    assert retrain["p_removed"].nunique() == 2
    # each reference's own information (its lower bound behind the certifiable margin; 0 where this tiny model
    # carries none)
    assert (redraws["information"] >= redraws["information_lower"]).all() and (redraws["information_lower"] >= 0).all()
    assert redraws["certifiable_margin"].between(0, 1, inclusive="right").all()
    # from the lower bound, moved by how the auditor's binned likelihood drops out to the margin (a ratio c of
    # 0.25-4 moves it by 1 / sqrt(c); none is certified without information)
    quadratic = pd.Series(
        [certifiable_margin(row.n_query, row.n_reference, row.information_lower) for row in redraws.itertuples()],
        index=redraws.index,
    )
    assert redraws["certifiable_margin"].between(quadratic.clip(upper=1.0) / 2, 2 * quadratic).all()
    for row in redraws.itertuples():
        at_auto = decide_reference_verdict(
            row.p_removed, row.p_retained, row.retained_upper_bound, alpha=config.alpha, margin=row.certifiable_margin
        )
        assert row.verdict == row.verdict_auto == at_auto
    assert not audit_against_redrawn_references(UnlearningGridConfig(), entry, target, None)  # no seeds, no audits
