"""The engine table: its rows, the option checks, and a test-only toy engine registered through it.

The toy shows all that adding an engine takes: one module (here, the top of this file: its
``score`` and its ``check``) and one ``EngineSpec`` row (:func:`toy_engine`). It scores the query
through the oracle in this process, second half first, and records each audit it scored; nothing
else is touched, and ``audit`` runs with it, ``ema audit --help`` offers it and ``ema audit
--engine toy-reversed`` runs it, with the in-process engine's numbers and verdicts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.oracle import Oracle, Predictions
from ema.tracking import keys
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.audit_in_process import membership_table, run_methods
from ema.workflows.audit_session import AuditSession, Scored, audit_target, log_audit_params
from ema.workflows.engines import (
    ENGINE_IN_PROCESS,
    ENGINE_SPARK,
    ENGINES,
    EngineSpec,
    check_engine,
    engine_row,
    register_engine,
    unregister_engine,
)
from ema.workflows.methods import engine_help, method_engines
from tests.workflows.conftest import probe_output

TOY = "toy-reversed"
#: The query names the toy engine scored, in order: what shows that the audit ran on it.
SCORED_BY_TOY: list[str] = []

# --------------------------------------------------------------------------- the toy engine: its module


@contextmanager
def score_reversed(config: AuditConfig, oracle: Oracle | None, progress: bool) -> Iterator[Scored]:
    """Score the query's second half, then its first, through the oracle here; audit the joined predictions."""
    target = audit_target(config)
    data = target.query_set(
        query=config.query, query_file=None, query_table=config.query_table, max_images=config.max_query
    )
    log_audit_params(config, target, **{keys.PARAM_QUERY_FINGERPRINT: data.fingerprint})
    session = AuditSession(config, target, data, oracle or target.oracle(outputs=config.outputs), progress)
    half = len(data.x) // 2
    second, first = session.oracle.predict(data.x[half:]), session.oracle.predict(data.x[:half])
    predictions = Predictions(np.concatenate([first.proba, second.proba]), first.access, first.detected)
    results, tags = run_methods(session, predictions)
    SCORED_BY_TOY.append(config.query_name)
    membership = {keys.ARTIFACT_MEMBERSHIP: membership_table(data, results)}
    yield Scored(session, results, tags, predictions.access, predictions.detected, data.fingerprint, membership)


def refuse_query_files(config: AuditConfig) -> None:
    """The toy reads named query sets and tables only."""
    if config.query_file is not None:
        raise InputError(f"expected --query or --query-table with --engine {TOY}, got --query-file {config.query_file}")


def toy_engine() -> EngineSpec:
    """The toy engine's row: the one line of the table a new engine adds."""
    return EngineSpec(
        name=TOY, help="a test-only toy: second half first", score=score_reversed, check=refuse_query_files,
        runs_every_method=True,
    )  # fmt: skip


@pytest.fixture
def toy():
    """The toy registered in the engine table for one test, removed after."""
    row = register_engine(toy_engine())
    yield row
    unregister_engine(row.name)


# --------------------------------------------------------------------------- the built-in rows


def test_engine_names_and_help_come_from_the_table_in_its_order():
    assert tuple(ENGINES) == (ENGINE_IN_PROCESS, ENGINE_SPARK)
    assert engine_help() == (
        "Where the query is scored: in-process (in this process), spark (on Spark, from a --query-table; "
        "--method ema only)."
    )


def test_an_engine_that_runs_every_method_runs_those_that_do_not_name_it(toy):
    assert method_engines("calibrated") == (ENGINE_IN_PROCESS, TOY)
    assert method_engines("ema") == (ENGINE_IN_PROCESS, ENGINE_SPARK, TOY)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"engine": "gpu"}, r"expected engine in \('in-process', 'spark'\), got 'gpu'"),
        (
            {"spark_master": "local[1]"},
            "expected --spark-master and --membership-out only with --engine spark, got --spark-master with "
            "--engine in-process",
        ),
        ({"engine": ENGINE_SPARK}, r"expected a query table \(--query-table URI\) with --engine spark"),
    ],
)
def test_check_engine_refuses_what_the_chosen_engine_cannot_honour(options, message):
    with pytest.raises(InputError, match=message):
        check_engine(AuditConfig(model_uri="models:/t/1", query="M6", **options))


def test_the_spark_engine_refuses_a_method_it_does_not_run():
    config = AuditConfig(model_uri="models:/t/1", query_table="t", engine=ENGINE_SPARK, method="calibrated")
    with pytest.raises(InputError, match="--engine spark runs --method ema only, got 'calibrated'"):
        config.validate()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (ENGINE_SPARK, "expected a new engine name, got 'spark', which is already in the engine table"),
        ("Toy Engine", "lowercase letters, digits and -, got 'Toy Engine'"),
    ],
)
def test_register_engine_refuses_a_taken_or_malformed_name(name, message):
    with pytest.raises(InputError, match=message):
        register_engine(EngineSpec(name=name, help="x", score=score_reversed))
    assert tuple(ENGINES) == (ENGINE_IN_PROCESS, ENGINE_SPARK)


def test_unregister_engine_refuses_an_unknown_name():
    with pytest.raises(InputError, match=r"expected engine in .*, got 'nope'"):
        unregister_engine("nope")


# --------------------------------------------------------------------------- the toy, end to end


def test_a_toy_engine_registered_in_the_table_audits_as_the_in_process_engine_does(trained, toy):
    _, outcome = trained
    uri = outcome.version.uri
    for query in ("M1", "M6"):
        here = audit(AuditConfig(model_uri=uri, query=query, method="ema+calibrated"), progress=False)
        on_toy = audit(AuditConfig(model_uri=uri, query=query, method="ema+calibrated", engine=TOY), progress=False)
        assert SCORED_BY_TOY[-1] == query
        for method, result in here.results.items():
            assert on_toy.results[method].verdict == result.verdict
            assert on_toy.results[method].metrics == pytest.approx(result.metrics, nan_ok=True)
        run = MlflowClient().get_run(on_toy.run_id)
        assert run.data.tags[keys.TAG_ENGINE] == run.data.params[keys.PARAM_ENGINE] == TOY


def test_the_toy_engines_own_check_and_other_engines_options_refuse_before_any_run(toy):
    assert engine_row(TOY) is toy
    with pytest.raises(InputError, match=f"expected --query or --query-table with --engine {TOY}, got --query-file"):
        AuditConfig(model_uri="models:/t/1", query_file="q.npz", engine=TOY).validate()
    with pytest.raises(InputError, match=f"only with --engine spark, got --membership-out with --engine {TOY}"):
        AuditConfig(model_uri="models:/t/1", query="M6", engine=TOY, membership_out="out").validate()


#: Registers the toy (as a plug-in would, before the CLI is imported), then runs ``ema audit --help`` and
#: ``ema audit --engine toy-reversed`` on the model given as the first argument, in one process.
PROBE = """
import sys
from ema.workflows.engines import register_engine
from tests.workflows.test_engines import SCORED_BY_TOY, toy_engine
register_engine(toy_engine())
from ema_cli.cli import main
main(["audit", "--help"], prog_name="ema", standalone_mode=False)
main(["audit", "--model", sys.argv[1], "--query", "M6", "--engine", "toy-reversed", "--no-progress"],
     prog_name="ema", standalone_mode=False)
print("scored by the toy:", *SCORED_BY_TOY)
"""


def test_a_toy_engine_registered_in_the_table_is_offered_and_run_by_ema_audit(trained):
    _, outcome = trained
    words = probe_output(PROBE, outcome.version.uri)
    assert "--engine [in-process|spark|toy-reversed]" in words
    assert "reversed (a test-only toy: second half first)." in words  # click breaks the line after "toy-"
    assert "scored by the toy: M6" in words
