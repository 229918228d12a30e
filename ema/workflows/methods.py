"""The method table: every audit method ``--method`` offers, one row each, and everything derived from it.

A row (:mod:`ema.workflows.method_rows`) is a :class:`~ema.workflows.method_rows.MethodSpec` (one
auditor method: its name, the auditor classes it builds, the runner that calibrates and runs them on
an audit's data, whether it needs class probabilities, the engines it runs on, a help phrase and its
metric vocabulary) or a :class:`~ema.workflows.method_rows.Combination` (several methods in one
run; the first one's verdict is the run's). Derived from the rows:
the names (:data:`METHODS`), what each name runs (:func:`method_plan`), the ``--method``
choices and help (:func:`method_help`; the ``--engine`` help names the methods of an engine that
does not run them all, :func:`engine_help`), the engine and access checks of an audit, the
report's metric kinds and meanings (:func:`metric_vocabulary`), and the grids' "which methods
carry EMA's numbers" (:func:`methods_running`).

This module imports no runner, mlflow or torch: ``ema audit --help`` reads it. The built-in
runners live in :mod:`ema.workflows.audit_methods` and are imported when an audit first runs one.

Adding a method
---------------
1. Write its auditor: one module in ``ema/auditors/`` (see :mod:`ema.auditors`), and one line
   for it in ``BUILT_IN_AUDITORS`` of ``tests/core/test_check_auditor.py``.
2. Add one :class:`~ema.workflows.method_rows.MethodSpec` row to ``_BUILT_IN`` below. An auditor that calibrates on the
   target's member and non-member references (as the reference auditor does) takes the generic
   runner ``run_on_references(factory)`` of :mod:`ema.workflows.audit_methods`; one that needs
   other evidence gets a runner of its own there.

``ema audit --method NAME`` then runs it, logs its metrics and verdict, and ``report.html``
shows its p-values, power and numbers with their meanings. Code outside the package (a
plug-in, a test) adds a row with :func:`register_method`.
"""

from __future__ import annotations

from ema.auditors.attack import ATTACK_METRICS, AUC_METRIC
from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.ema import EMAAuditor
from ema.auditors.ks_ratio import KSRatioAuditor
from ema.auditors.marks import MarksAuditor
from ema.auditors.metrics import CHECK, ESTIMATE, POWER, PVALUE, Metric
from ema.auditors.reference import ATTACK_SUFFIX, ReferenceAuditor
from ema.errors import InputError
from ema.oracle import ACCESS_PROBABILITIES
from ema.signals import PAPER_SIGNALS
from ema.tracking import keys
from ema.workflows.deferred import deferred
from ema.workflows.engines import ENGINE_IN_PROCESS, ENGINE_SPARK, ENGINES, engine_row
from ema.workflows.method_rows import (
    CALIBRATION_MODEL_NEEDED,
    CALIBRATION_MODEL_NOT_NEEDED,
    CALIBRATION_MODEL_WITHOUT_MEMBERS,
    Combination,
    Method,
    MethodSpec,
    Runner,
    check_combination,
    check_spec,
)

#: What a NaN information metric is: the references' held-out scores did not vary (not logged).
NOT_ESTIMABLE = "not estimable"
#: How a minimum detectable share is called where no share up to the whole set reaches the target power.
NOT_REACHED = "not reached"


def _deferred(name: str) -> Runner:
    """The runner ``name`` of :mod:`ema.workflows.audit_methods`, imported when first called (it imports mlflow)."""
    return deferred("ema.workflows.audit_methods", name)


FLAG_RATE = Metric(keys.METRIC_FLAG_RATE, ESTIMATE, "share of query samples flagged as members (M = 1)")
N_QUERY = Metric(keys.METRIC_N_QUERY, ESTIMATE, "number of query samples")


def attack_metrics(signals: tuple[str, ...], where: str) -> tuple[Metric, ...]:
    """The attack-strength metrics (``mia_auc.<signal>`` and so on) of each score, measured on ``where``."""
    return tuple(
        Metric(f"{name}.{signal}", ESTIMATE, meaning.format(signal=signal, where=where))
        for signal in signals
        for name, meaning in ATTACK_METRICS.items()
    )


_BUILT_IN: tuple[Method, ...] = (
    MethodSpec(
        name=EMAAuditor.method,
        help="the paper",
        auditors=(EMAAuditor,),
        runner=_deferred("run_ema"),
        needs_probabilities=False,
        engines=(ENGINE_IN_PROCESS, ENGINE_SPARK),
        trail=(keys.METRIC_RHO_EMA, keys.METRIC_RHO_EMA_KS),
        metrics=(
            Metric(
                keys.METRIC_RHO_EMA,
                PVALUE,
                "p-value of EMA's two-sample t-test (pooled variance) of the membership vector M against an all-ones "
                "vector (rho_EMA)",
            ),
            Metric(keys.METRIC_RHO_EMA_KS, PVALUE, "p-value of EMA's Kolmogorov-Smirnov test of M against all ones"),
            FLAG_RATE,
            N_QUERY,
            *attack_metrics(PAPER_SIGNALS, "the calibration model"),
        ),
    ),
    MethodSpec(
        name=KSRatioAuditor.method,
        help="Liu & Tsaftaris",
        auditors=(KSRatioAuditor,),
        runner=_deferred("run_ks_ratio"),
        metrics=(
            Metric(
                keys.METRIC_RHO_KS,
                ESTIMATE,
                "Liu & Tsaftaris's KS ratio (not a p-value; at or above its threshold means forgotten)",
            ),
            Metric("ks_target", ESTIMATE, "KS statistic between the target's and the query model's outputs"),
            Metric(
                "ks_calibration",
                ESTIMATE,
                "KS statistic between the calibration-set model's and the query model's outputs",
            ),
            N_QUERY,
            FLAG_RATE,
        ),
    ),
    Combination(name="both", help="ema and ks-ratio in one run", parts=(EMAAuditor.method, KSRatioAuditor.method)),
    MethodSpec(
        name=CalibratedAuditor.method,
        help="tests removed and retained, may say inconclusive",
        auditors=(ReferenceAuditor, CalibratedAuditor),
        runner=_deferred("run_calibrated"),
        certifies=True,
        calibration_model=CALIBRATION_MODEL_WITHOUT_MEMBERS,
        trail=(
            "p_removed",
            "p_retained",
            "retained_fraction",
            "retained_ci_low",
            "retained_ci_high",
            "certifiable_margin",
            f"{AUC_METRIC}.{ATTACK_SUFFIX}",
        ),
        metrics=(
            Metric("p_removed", PVALUE, "p-value of the hypothesis 'the query set was removed' (small: it was not)"),
            Metric("p_retained", PVALUE, "p-value of the hypothesis 'the query set is retained' (small: it is not)"),
            Metric(
                "p_too_forgotten",
                CHECK,
                "shift check: 'the query is no less member-like than never-seen data' (small: over-forgotten; warns at "
                "its own level)",
            ),
            Metric("retained_fraction", ESTIMATE, "estimated share of the query set the model still carries"),
            Metric("retained_ci_low", ESTIMATE, "lower end of the retained share's confidence interval"),
            Metric("retained_ci_high", ESTIMATE, "upper end of the retained share's confidence interval"),
            Metric(
                "retained_lower_bound_target_only", ESTIMATE, "lower bound on the retained share from the target alone"
            ),
            Metric("transfer_gap", ESTIMATE, "how far the calibration model's behaviour may differ from the target's"),
            Metric(
                "power_retained",
                POWER,
                "power: the chance this audit calls a fully retained query set of this size memorized",
            ),
            Metric(
                "min_detectable_fraction",
                POWER,
                "smallest retained share of the query set this audit detects with its target power",
                NOT_REACHED,
            ),
            Metric(
                "certifiable_margin",
                POWER,
                "smallest retained share this audit certifies (not_memorized) with probability 0.85 if the query "
                "was removed; from the sizes and references, fixed before the query's outcome (1: none below 1)",
            ),
            Metric(
                "information",
                ESTIMATE,
                "Fisher information per sample about the retained share, cross-fitted on the two references",
                NOT_ESTIMABLE,
            ),
            Metric(
                "information_lower",
                ESTIMATE,
                "the information's lower bound (one standard error below it), from which the certifiable "
                "margin is computed",
                NOT_ESTIMABLE,
            ),
            Metric(
                "information_single_view",
                ESTIMATE,
                "with --augment shifts: the information of the unshifted images' score alone",
                NOT_ESTIMABLE,
            ),
            Metric(
                "information_single_view_lower",
                ESTIMATE,
                "with --augment shifts: the unshifted images' information lower bound, from which their margin is "
                "computed",
                NOT_ESTIMABLE,
            ),
            Metric(
                "certifiable_margin_single_view",
                POWER,
                "with --augment shifts: the certifiable margin the unshifted images alone would give",
            ),
            Metric(
                "retained_upper_bound",
                ESTIMATE,
                "one-sided upper bound on the retained share at the certify level; not_memorized needs it <= margin",
            ),
            Metric(
                "p_class_mix",
                CHECK,
                "shift check: the query's class mix against the non-member reference's (warns at its own level)",
            ),
            Metric(
                "p_mixture_fit",
                CHECK,
                "shift check: fit of the member / non-member mixture to the query (warns at its own level)",
            ),
            N_QUERY,
            FLAG_RATE,
            *attack_metrics((ATTACK_SUFFIX,), "the member and non-member references (scored on the target)"),
        ),
    ),
    Combination(name="ema+calibrated", help="both, EMA's verdict", parts=(EMAAuditor.method, CalibratedAuditor.method)),
    MethodSpec(
        name=MarksAuditor.method,
        help="an owner's secret mark, with --mark-key",
        auditors=(MarksAuditor,),
        runner=_deferred("run_marks"),
        needs_probabilities=False,
        certifies=True,
        calibration_model=CALIBRATION_MODEL_NOT_NEEDED,
        trail=("p_mark", "mark_effect", "mark_effect_upper_bound"),
        metrics=(
            Metric(
                "p_mark",
                PVALUE,
                "p-value of 'the trigger moves predictions to the mark's class no more than to all others' "
                "(exact sign test on the moved pairs, a noise key's moves that a control makes too left out; small: "
                "the mark is present)",
            ),
            Metric(
                "mark_effect",
                ESTIMATE,
                "share of eligible query images the trigger moves to the mark's class (a noise key: and none of its "
                "controls does)",
            ),
            Metric(
                "mark_effect_upper_bound",
                ESTIMATE,
                "one-sided Clopper-Pearson upper bound on the trigger's effect at the certify level; "
                "not_memorized needs it <= the margin",
            ),
            Metric("mark_margin", ESTIMATE, "the margin the trigger's effect is certified below (--margin)"),
            Metric("moved_to_target", ESTIMATE, "eligible query images the trigger moves to the mark's class"),
            Metric("moved_elsewhere", ESTIMATE, "eligible query images the trigger moves to another class"),
            Metric("n_controls", ESTIMATE, "control triggers stamped on the images the trigger moved (a noise key)"),
            Metric(
                "moved_by_controls_too",
                ESTIMATE,
                "images the trigger moved to the mark's class that a control trigger moves there too: a pull of "
                "the pattern family, not counted as the mark's effect (a noise key)",
            ),
            Metric(
                "n_eligible",
                ESTIMATE,
                "query images neither of the mark's class nor predicted as it when clean (the pairs tested)",
            ),
            Metric(
                "power_mark",
                POWER,
                "power: the chance this audit calls memorized a mark whose trigger moves a share equal to the margin "
                "of eligible images to its class (none elsewhere)",
            ),
            Metric(
                "mark_min_detectable_effect",
                POWER,
                "smallest trigger effect this audit calls memorized with probability 0.9 (none moved elsewhere)",
            ),
            Metric(
                "mark_certifiable_margin",
                POWER,
                "smallest margin this audit certifies (not_memorized) when the trigger moves no image to the mark's "
                "class; from the number of eligible images, fixed before the stamped images are scored",
            ),
            N_QUERY,
            FLAG_RATE,
        ),
    ),
)

_TABLE: dict[str, Method] = {}
#: Every method name, in table order: a live view, so a method registered later is in it too.
METHODS = _TABLE.keys()


def register_method(method: Method) -> Method:
    """Add a row to the method table; returns it.

    Raises
    ------
    InputError
        If the name is taken or malformed, a combination names an unknown method, an engine is
        unknown, or a metric key is already in the table with another kind or meaning.
    """
    if method.name in _TABLE:
        raise InputError(f"expected a new method name, got {method.name!r}, which is already in the method table")
    if isinstance(method, MethodSpec):
        check_spec(method, metric_vocabulary())
    else:
        check_combination(method, _TABLE)
    _TABLE[method.name] = method
    return method


def unregister_method(name: str) -> None:
    """Remove a row :func:`register_method` added (a test's toy method, a plug-in being unloaded)."""
    method_row(name)
    del _TABLE[name]


def method_row(name: str) -> Method:
    """The row named ``name``."""
    if name not in _TABLE:
        raise InputError(f"expected method in {tuple(_TABLE)}, got {name!r}")
    return _TABLE[name]


def method_spec(name: str) -> MethodSpec:
    """The single method named ``name`` (a part of a plan)."""
    row = method_row(name)
    if not isinstance(row, MethodSpec):
        raise InputError(f"expected a single method, got the combination {name!r} of {row.parts}")
    return row


def method_plan(name: str) -> tuple[str, ...]:
    """The single methods ``--method name`` runs, in order; the first one's verdict is the run's."""
    return method_row(name).plan


def method_engines(name: str) -> tuple[str, ...]:
    """The engines ``name``'s plan runs on: those that run every method, and those all its parts name."""
    plan = [method_spec(part) for part in method_plan(name)]
    return tuple(
        engine
        for engine in ENGINES
        if engine_row(engine).runs_every_method or all(engine in spec.engines for spec in plan)
    )


def check_engine_runs(name: str, engine: str) -> None:
    """Refuse a plan with a method that ``engine`` does not run (its auditors need the predictions here).

    Raises
    ------
    InputError
        Naming the methods the engine runs.
    """
    if engine not in method_engines(name):
        on_engine = " or ".join(m for m in _TABLE if engine in method_engines(m))
        raise InputError(
            f"--engine {engine} runs --method {on_engine} only, got {name!r}: its auditors need the query's "
            f"predictions in this process; audit it with --engine {ENGINE_IN_PROCESS}"
        )


def certifies_margin(name: str) -> bool:
    """Whether ``--method name`` runs a method whose ``not_memorized`` certifies a bound below ``--margin``."""
    return any(method_spec(part).certifies for part in method_plan(name))


def needs_calibration_model(name: str, *, members_file: bool) -> bool:
    """Whether ``--method name`` needs the workbench's calibration model, ``members_file`` saying whether a member
    reference file was given (the calibrated auditor then reads member behaviour from the target itself)."""
    needs = {method_spec(part).calibration_model for part in method_plan(name)}
    return CALIBRATION_MODEL_NEEDED in needs or (not members_file and CALIBRATION_MODEL_WITHOUT_MEMBERS in needs)


def methods_certifying() -> tuple[str, ...]:
    """The ``--method`` names that take ``--margin`` and ``--certify-level``, in table order."""
    return tuple(name for name in _TABLE if certifies_margin(name))


def methods_running(single: str) -> tuple[str, ...]:
    """The ``--method`` names whose plan runs the single method ``single``, in table order."""
    return tuple(name for name, row in _TABLE.items() if single in row.plan)


def check_access(name: str, access: str) -> None:
    """Refuse a plan with a method that needs class probabilities when the model returns ``access`` (labels).

    Raises
    ------
    InputError
        Naming the method and the methods that take labels.
    """
    for part in method_plan(name):
        if method_spec(part).needs_probabilities and access != ACCESS_PROBABILITIES:
            label_only = " or ".join(m for m, row in _TABLE.items() if not _needs_probabilities(row))
            raise InputError(
                f"method {part!r} needs class probabilities, got a {access} model; use --method {label_only}"
            )


def _needs_probabilities(row: Method) -> bool:
    return any(method_spec(part).needs_probabilities for part in row.plan)


def metric_vocabulary() -> dict[str, Metric]:
    """Every metric of every method, by key: what the report says each number is."""
    return {metric.key: metric for row in _TABLE.values() if isinstance(row, MethodSpec) for metric in row.metrics}


def method_help() -> str:
    """The ``--method`` help: each method with its phrase, in table order."""
    return ", ".join(f"{name} ({row.help})" for name, row in _TABLE.items()) + "."


def engine_help() -> str:
    """The ``--engine`` help: each engine of the engine table with its phrase, and its methods unless it runs all."""
    described = []
    for name in ENGINES:
        row = engine_row(name)
        on_engine = " or ".join(m for m in _TABLE if name in method_engines(m))
        only = "" if row.runs_every_method else f"; --method {on_engine} only"
        described.append(f"{name} ({row.help}{only})")
    return f"Where the query is scored: {', '.join(described)}."


for _row in _BUILT_IN:
    register_method(_row)
