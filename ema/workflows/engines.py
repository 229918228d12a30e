"""The engine table: where an audit's query is scored, one row per engine, and what is derived from it.

A row is an :class:`EngineSpec`: the engine's name (the ``--engine`` value), a help phrase, its
own options (``AuditConfig`` fields such as ``spark_master``, refused under any other engine), the
check of the options it is given (:attr:`EngineSpec.check`), whether it runs every method of the
method table, and ``score(config, oracle, progress)``: a context manager that resolves the target,
logs the run's params, scores the query, runs the auditors and yields a
:class:`~ema.workflows.audit_session.Scored`. :func:`ema.workflows.audit.audit` picks the row by
name and does everything else (gates, strict, logging, report, the version's record) the same way
for every engine, so the metrics, tags and verdict do not depend on where the query was scored.

The built-in engines: ``in-process`` (:mod:`ema.workflows.audit_in_process`, the default) and
``spark`` (:mod:`ema.workflows.audit_spark`, with its executor side in :mod:`ema.engines`). This
module imports neither: ``ema audit --help`` reads the table, and the engines import mlflow.

Adding an engine
----------------
Write one module in ``ema/workflows/`` with its ``score`` (and, when it takes options or refuses
some, its ``check``), and add one :class:`EngineSpec` row to ``_BUILT_IN`` below, naming them with
:func:`~ema.workflows.deferred.deferred`. An engine that hands every method runner the query's
predictions in this process sets ``runs_every_method``; one that computes the verdict elsewhere
runs the methods that list it in their ``MethodSpec.engines``. Code outside the package (a plug-in,
a test) adds a row with :func:`register_engine`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ema.errors import InputError
from ema.workflows.deferred import deferred

if TYPE_CHECKING:
    from ema.oracle import Oracle
    from ema.workflows.audit_config import AuditConfig
    from ema.workflows.audit_session import Scored

#: An engine's scoring: ``score(config, oracle, progress)`` yields what the audit logs and decides on.
Score = Callable[["AuditConfig", "Oracle | None", bool], AbstractContextManager["Scored"]]
#: An engine's option check: raises :class:`~ema.errors.InputError` on an option it cannot honour.
Check = Callable[["AuditConfig"], None]

ENGINE_IN_PROCESS = "in-process"
ENGINE_SPARK = "spark"

_NAME = re.compile(r"[a-z][a-z0-9-]*")


def accept_every_option(config: AuditConfig) -> None:
    """The check of an engine that takes every option of an audit (the in-process engine's)."""


@dataclass(frozen=True, kw_only=True)
class EngineSpec:
    """One engine: a row of the engine table.

    Attributes
    ----------
    name : str
        The ``--engine`` value, the run's ``engine`` param and tag.
    help : str
        A phrase for ``ema audit --help``, shown as ``name (help)``.
    score : callable
        ``score(config, oracle, progress)``, a context manager yielding ``Scored``; what it
        yields (a membership file on disk, say) must live until the audit has logged it.
    check : callable
        ``check(config)``: refuses the options this engine cannot honour, before any work.
    options : tuple of (str, str)
        The ``AuditConfig`` fields only this engine reads, with their flags; any other engine
        refuses them.
    runs_every_method : bool
        It hands every method runner the query's predictions in this process; otherwise it
        runs the methods whose ``MethodSpec.engines`` name it.
    """

    name: str
    help: str
    score: Score
    check: Check = accept_every_option
    options: tuple[tuple[str, str], ...] = ()
    runs_every_method: bool = False


_BUILT_IN = (
    EngineSpec(
        name=ENGINE_IN_PROCESS,
        help="in this process",
        score=deferred("ema.workflows.audit_in_process", "score_in_process"),
        runs_every_method=True,
    ),
    EngineSpec(
        name=ENGINE_SPARK,
        help="on Spark, from a --query-table",
        score=deferred("ema.workflows.audit_spark", "score_on_spark"),
        check=deferred("ema.workflows.audit_spark", "check_spark"),
        options=(("spark_master", "--spark-master"), ("membership_out", "--membership-out")),
    ),
)

_TABLE: dict[str, EngineSpec] = {}
#: Every engine name, in table order: a live view, so an engine registered later is in it too.
ENGINES = _TABLE.keys()


def register_engine(engine: EngineSpec) -> EngineSpec:
    """Add a row to the engine table; returns it.

    Raises
    ------
    InputError
        If the name is taken or malformed.
    """
    if engine.name in _TABLE:
        raise InputError(f"expected a new engine name, got {engine.name!r}, which is already in the engine table")
    if not _NAME.fullmatch(engine.name):
        raise InputError(f"expected an engine name of lowercase letters, digits and -, got {engine.name!r}")
    _TABLE[engine.name] = engine
    return engine


def unregister_engine(name: str) -> None:
    """Remove a row :func:`register_engine` added (a test's toy engine, a plug-in being unloaded)."""
    engine_row(name)
    del _TABLE[name]


def engine_row(name: str) -> EngineSpec:
    """The row named ``name``."""
    if name not in _TABLE:
        raise InputError(f"expected engine in {tuple(_TABLE)}, got {name!r}")
    return _TABLE[name]


def check_engine(config: AuditConfig) -> None:
    """Refuse an unknown engine, another engine's options, and what the chosen engine's own check refuses.

    Raises
    ------
    InputError
        Naming the engine and the option.
    """
    chosen = engine_row(config.engine)
    for row in _TABLE.values():
        given = [flag for field, flag in row.options if getattr(config, field) is not None]
        if row is not chosen and given:
            flags = " and ".join(flag for _, flag in row.options)
            raise InputError(
                f"expected {flags} only with --engine {row.name}, got {' '.join(given)} with --engine {chosen.name}"
            )
    chosen.check(config)


for _row in _BUILT_IN:
    register_engine(_row)
