"""What an audit is asked to do (``AuditConfig``), and the per-audit state that does it (``AuditSession``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.marks import MarksAuditor
from ema.auditors.reference import AUTO_MARGIN, DEFAULT_MARGIN, default_certify_level
from ema.auditors.result import AuditResult
from ema.data.arrays import ArraySet
from ema.data.corruption import CORRUPTIONS, DEFAULT_CORRUPTION, check_quality
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.shifts import AUGMENT_NONE, AUGMENT_SHIFTS, AUGMENTATIONS, N_SHIFT_VIEWS, shifted_set
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import InputError
from ema.inputs import INPUT_DTYPES, InputTransform
from ema.oracle import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TIMEOUT,
    HTTP_FORMATS,
    OUTPUT_KINDS,
    Oracle,
    Predictions,
    PyfuncOracle,
)
from ema.stats import EMA_TESTS
from ema.thresholds import THRESHOLD_MODES
from ema.tracking import keys
from ema.tracking.runs import log_batch
from ema.training.devices import CPU, describe_device, resolve_device
from ema.validation import (
    check_choice,
    check_finite,
    check_model_name,
    check_open_unit,
    check_positive_int,
    redact_url,
)
from ema.workflows.calibrate import CalibrationPlan, ensure_plan, fit_thresholds
from ema.workflows.engines import ENGINE_IN_PROCESS, check_engine
from ema.workflows.methods import METHODS, check_engine_runs, method_plan
from ema.workflows.references import Reference, member_reference, nonmember_reference
from ema.workflows.target import SOURCE_SUPPLIED, Target, resolve_target

#: Clean images a marks audit queries by default (each twice: clean and stamped).
DEFAULT_MARK_QUERIES = 200


@dataclass(frozen=True)
class SuppliedCalibration:
    """An already-trained calibration model and the calibration samples it was / was not trained on."""

    model_uri: str
    members_file: str
    nonmembers_file: str

    def thresholds(
        self,
        target: Target,
        outputs: str = "auto",
        max_images: int = DEFAULT_MAX_QUERY,
        label_column: str = "label",
    ) -> dict:
        """EMA's thresholds from this model's outputs (of kind ``outputs``) on its members and non-members.

        Each file is read only when it holds at most ``max_images`` images (a table's labels in
        ``label_column``), and resized as the target's sets are; the model scores on the target's device.
        """
        oracle = PyfuncOracle(self.model_uri, transform=target.transform, outputs=outputs, device=target.device)
        members, nonmembers = (
            target.read_set(f, max_images=max_images, label_column=label_column)
            for f in (self.members_file, self.nonmembers_file)
        )
        return fit_thresholds(oracle, members, nonmembers).to_dict()


@dataclass(frozen=True, kw_only=True)
class AuditConfig:
    """What an audit is asked to do: built once (by the CLI, a grid or a caller), validated, passed down.

    Attributes
    ----------
    model_uri, model_url
        The target: a pyfunc URI (``models:/NAME@ALIAS``, ``runs:/...``, a path) and/or a
        scoring server's ``/invocations`` URL (predictions then come from the server).
    query, query_file, query_table
        Exactly one: a named query set of the target's splits, a set file (``.npz``, ``.csv`` or
        ``.parquet``), or a Parquet query table (:mod:`ema.data.parquet`; any URI Spark reads with
        ``engine="spark"``).
    query_label
        What runs and records call the query (its ``query`` param, the run's name, the version's
        trail); default: the named set, or the file's or table's name. The evaluator gives the
        MLflow dataset's name here.
    label_column
        The label column of every table file the audit reads (query, references, calibration).
    calibration_file
        The auditor's own data from the target's domain, disjoint from its training data: it
        replaces the splits' calibration set (f_cal trains on one half, thresholds are picked
        on the other) and is the default non-member reference. Its inputs must be of the
        query's kind, shape and feature names.
    method, test, alpha, threshold_mode
        Which auditors run (a name of the method table, :mod:`ema.workflows.methods`), EMA's test,
        the significance level and the threshold granularity.
    k, cal_seed, corruption, calibration_name
        The calibration plan: quality k, seed, corruption protocol, registered name.
    outputs, output_name, recipe_file, transform, input_shape, input_dtype
        What the model returns (and which of its named outputs to read), how the calibration
        model is trained, how inputs are scaled, the model's input shape and type (overriding its
        signature's).
    image_size
        Resize the images of every set the audit reads (query, references, calibration members
        and non-members) to this side (centre-cropped to a square, bilinear); None never resizes.
    calibration, calibration_outputs
        An already-trained calibration model (EMA's thresholds come from it), and what it
        returns (default: as ``outputs``).
    reference_file, members_file
        Reference non-members (default: the clean calibration set) and members (default: a
        workbench target's other training folds) for the calibrated auditor and the gates.
    augment
        ``"shifts"``: the calibrated auditor scores every sample of the query and of both
        references as 9 images, itself and its 8 one-pixel shifts (:mod:`ema.data.shifts`), and
        its per-sample score becomes :func:`~ema.auditors.views.view_score` of them (9x the
        oracle queries). Images only, with a member reference; ``"none"`` (default): one view.
    margin, certify_level
        The calibrated auditor says ``not_memorized`` only when the retained share's one-sided
        upper confidence bound at ``certify_level`` (None: 1 - alpha / 2) is at most ``margin``;
        ``margin="auto"``: at the audit's own certifiable margin (the smallest it certifies with
        probability 0.85 for a removed query of this size, known before the query is scored).
    mark_key, queries
        ``--method marks``: the owner's key file (:mod:`ema.data.marks`; read inside the run, never
        logged), and the most query images audited, the first ones of the query (default
        :data:`DEFAULT_MARK_QUERIES`); each is scored clean and with the trigger stamped on it.
    max_query
        The most images a set read from a file or table may hold (the query, ``--reference``,
        ``--members``, the calibration members and non-members), checked from its header or
        metadata before it is read (:mod:`ema.data.limits`).
    strict
        A warned audit (see ``AuditOutcome.warnings``) gets the verdict ``inconclusive``.
    timeout, request_timeout
        Over HTTP: seconds the whole scoring, and one request, may take (wall time). Inside a
        command with a ``--timeout`` (:func:`ema.limits.command_limits`) the scoring gets what is
        left of the command's time instead of ``timeout``.
    http_concurrency, http_format
        Over HTTP: requests in flight at once, and how batches are sent (``auto``: Parquet when
        the registered model's signature declares its inputs, else JSON; see :class:`HttpOracle`).
    engine, spark_master, membership_out
        Where the query is scored (a name of the engine table, :mod:`ema.workflows.engines`,
        whose row checks the options it is given); with ``"spark"``, the master (default: the
        active session, else ``local[2]``) and where the membership table is written (default:
        logged as the run's ``membership.parquet`` artifact). Another engine refuses both.
    device
        Where torch trains the calibration and helper models and scores a model loaded in this
        process: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``, resolved (:func:`resolved_device`)
        before the audit's run starts. Recorded as the run's ``device`` param.
    """

    model_uri: str | None = None
    model_url: str | None = None
    query: str | None = None
    query_file: str | None = None
    query_table: str | None = None
    query_label: str | None = None
    label_column: str = DEFAULT_LABEL_COLUMN
    calibration_file: str | None = None
    method: str = "ema"
    test: str = "t"
    alpha: float = 0.1
    threshold_mode: str = "global"
    k: int = 100
    cal_seed: int = 0
    corruption: str = DEFAULT_CORRUPTION
    calibration_name: str = keys.CALIBRATION_MODEL_NAME
    outputs: str = "auto"
    output_name: str | None = None
    recipe_file: str | None = None
    transform: InputTransform | None = None
    input_shape: tuple[int, ...] | None = None
    input_dtype: str | None = None
    image_size: int | None = None
    calibration: SuppliedCalibration | None = None
    calibration_outputs: str | None = None
    reference_file: str | None = None
    members_file: str | None = None
    augment: str = AUGMENT_NONE
    margin: float | str = DEFAULT_MARGIN
    certify_level: float | None = None
    mark_key: str | None = None
    queries: int | None = None
    max_query: int = DEFAULT_MAX_QUERY
    strict: bool = False
    timeout: float = DEFAULT_TIMEOUT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    http_concurrency: int = 1
    http_format: str = "auto"
    engine: str = ENGINE_IN_PROCESS
    spark_master: str | None = None
    membership_out: str | None = None
    device: str = CPU

    @property
    def query_name(self) -> str:
        """The name runs and records use: ``query_label``, else the named set, else the query file's or table's name."""
        if self.query_label is not None:
            return self.query_label
        if self.query is not None:
            return self.query
        return (
            Path(self.query_file).name if self.query_file is not None else self.query_table.rstrip("/").split("/")[-1]
        )

    @property
    def resolved_certify_level(self) -> float:
        """The one-sided level of the bound that certifies: as given, else 1 - alpha / 2."""
        return default_certify_level(self.alpha) if self.certify_level is None else float(self.certify_level)

    def validate(self) -> AuditConfig:
        """Check every option before any work; returns ``self``."""
        given = [v for v in (self.query, self.query_file, self.query_table) if v is not None]
        if len(given) != 1:
            raise InputError(
                f"expected exactly one of a query name, a query file or a query table, got query={self.query!r}, "
                f"query_file={self.query_file!r}, query_table={self.query_table!r}"
            )
        check_engine(self)
        if self.model_uri is None and self.model_url is None:
            raise InputError(
                "expected a model: a pyfunc URI (--model) or a scoring server URL (--model-url), got neither"
            )
        check_choice("method", self.method, METHODS)
        check_engine_runs(self.method, self.engine)
        check_choice("test", self.test, EMA_TESTS)
        check_choice("threshold_mode", self.threshold_mode, THRESHOLD_MODES)
        check_choice("outputs", self.outputs, OUTPUT_KINDS)
        if self.input_dtype is not None:
            check_choice("input dtype", self.input_dtype, INPUT_DTYPES)
        if self.calibration_outputs is not None:
            check_choice("calibration outputs", self.calibration_outputs, OUTPUT_KINDS)
            if self.calibration is None:
                raise InputError(
                    "expected --calibration-outputs only with --calibration-model, got no calibration model"
                )
        check_choice("corruption", self.corruption, tuple(CORRUPTIONS))
        check_open_unit("alpha", self.alpha)
        check_quality(self.k)
        check_model_name("calibration name", self.calibration_name)
        check_finite("timeout", self.timeout, minimum=0.0, open_minimum=True)
        check_finite("request timeout", self.request_timeout, minimum=0.0, open_minimum=True)
        check_choice("augment", self.augment, AUGMENTATIONS)
        if self.augment != AUGMENT_NONE and CalibratedAuditor.method not in method_plan(self.method):
            running = [name for name in METHODS if CalibratedAuditor.method in method_plan(name)]
            raise InputError(
                f"expected --augment {self.augment} with a method that runs the calibrated auditor "
                f"({', '.join(running)}), got --method {self.method}"
            )
        if self.margin != AUTO_MARGIN:
            check_open_unit("margin", self.margin)
        if self.certify_level is not None:
            check_open_unit("certify level", self.certify_level)
        self._check_marks()
        check_positive_int("max query", self.max_query)
        check_positive_int("HTTP concurrency", self.http_concurrency)
        check_choice("HTTP format", self.http_format, HTTP_FORMATS)
        return self

    def _check_marks(self) -> None:
        """``--mark-key`` exactly when the method runs the marks auditor; ``--queries`` only then."""
        runs_marks = MarksAuditor.method in method_plan(self.method)
        if runs_marks and self.mark_key is None:
            raise InputError(f"--method {self.method} needs the owner's key, got none: give --mark-key KEY.json")
        if not runs_marks and (self.mark_key is not None or self.queries is not None):
            raise InputError(
                f"expected --mark-key and --queries only with --method {MarksAuditor.method}, got them with --method "
                f"{self.method}"
            )
        if self.queries is not None:
            check_positive_int("queries", self.queries)

    @property
    def query_limit(self) -> int | None:
        """The most query images audited (the first ones): ``queries``, else the marks default, else all (None)."""
        if self.queries is not None or MarksAuditor.method not in method_plan(self.method):
            return self.queries
        return DEFAULT_MARK_QUERIES

    def params(self, target: Target) -> dict[str, object]:
        """The run's params: the options, and the target as resolved."""
        return {
            keys.PARAM_METHOD: self.method,
            keys.PARAM_TEST: self.test,
            keys.PARAM_ALPHA: self.alpha,
            keys.PARAM_QUERY: self.query_name,
            keys.PARAM_K: self.k,
            keys.PARAM_CAL_SEED: self.cal_seed,
            keys.PARAM_CORRUPTION: self.corruption,
            keys.PARAM_MODEL_URI: redact_url(target.model_uri or ""),
            keys.PARAM_MODEL_URL: redact_url(target.model_url or ""),
            keys.PARAM_MODEL_NAME: target.version.name if target.version else "",
            keys.PARAM_MODEL_VERSION: target.version.version if target.version else "",
            keys.PARAM_THRESHOLD_MODE: self.threshold_mode,
            keys.PARAM_OUTPUTS: self.outputs,
            keys.PARAM_OUTPUT_NAME: self.output_name or "",
            keys.PARAM_CALIBRATION_OUTPUTS: self.calibration_outputs or "",
            keys.PARAM_INPUT_SHAPE: ",".join(map(str, self.input_shape)) if self.input_shape else "",
            keys.PARAM_INPUT_DTYPE: self.input_dtype or "",
            keys.PARAM_AUGMENT: self.augment,
            keys.PARAM_MARGIN: self.margin,
            keys.PARAM_CERTIFY_LEVEL: self.resolved_certify_level,
            keys.PARAM_STRICT: self.strict,
            keys.PARAM_ENGINE: self.engine,
            keys.PARAM_LABEL_COLUMN: self.label_column,
            keys.PARAM_DEVICE: describe_device(target.device),
            # only when given: under `mlflow run` the project logs its own empty default ('') first
            **({keys.PARAM_CALIBRATION_FILE: self.calibration_file} if self.calibration_file else {}),
            **({keys.PARAM_QUERIES: self.query_limit} if self.query_limit is not None else {}),
        }

    def resolved_device(self) -> AuditConfig:
        """This configuration with its device resolved on this machine (``auto`` -> ``cuda:N`` or ``cpu``).

        Raises
        ------
        InputError
            If the device is not one of the accepted forms, or names CUDA this machine lacks.
        """
        return dataclasses.replace(self, device=resolve_device(self.device))


def audit_target(config: AuditConfig) -> Target:
    """The target the audit names, as both engines resolve it; refused at once when nothing can train its
    calibration model (no recipe, no clone and no supplied calibration model), before any scoring.
    ``--calibration-file`` is read here and becomes the target's calibration set.
    """
    target = resolve_target(
        config.model_uri,
        model_url=config.model_url,
        recipe_file=config.recipe_file,
        transform=config.transform,
        input_shape=config.input_shape,
        input_dtype=config.input_dtype,
        image_size=config.image_size,
        device=config.device,
    )
    if config.calibration is None:
        target.require_recipe()
    if config.calibration_file is None:
        return target
    calibration = target.read_set(
        config.calibration_file, max_images=config.max_query, label_column=config.label_column
    )
    return dataclasses.replace(target, calibration_data=calibration)


def log_audit_params(config: AuditConfig, target: Target, **extra: object) -> None:
    """The audit run's name and params: the options, the target as resolved, and ``extra`` (the query's fingerprint)."""
    log_batch(
        tags={keys.TAG_RUN_NAME: audit_run_name(config.query_name, config.method, target.label)},
        params={**config.params(target), **extra},
    )


#: The most characters of the query's name an audit's run name keeps (the MLflow UI cuts names at about 30).
RUN_NAME_QUERY_CHARS = 12
#: Letters each method of a combination keeps in a run name (``ema+calibrated`` -> ``ema+cal``).
RUN_NAME_METHOD_CHARS = 3


def audit_run_name(query: str, method: str, model: str) -> str:
    """An audit run's name, short enough for the MLflow UI's columns: ``M1 · ema+cal · ema-target v4``.

    The query's name is cut to :data:`RUN_NAME_QUERY_CHARS` (ending in ``…``), a combination's
    methods to their first :data:`RUN_NAME_METHOD_CHARS` letters; the model's label is kept
    whole (its version tells audits of one model apart).
    """
    if len(query) > RUN_NAME_QUERY_CHARS:
        query = query[: RUN_NAME_QUERY_CHARS - 1] + "…"
    if "+" in method:
        method = "+".join(part[:RUN_NAME_METHOD_CHARS] for part in method.split("+"))
    return f"{query} · {method} · {model}"


@dataclass(frozen=True)
class AuditSession:
    """One audit's state: its configuration, what that resolved to (the target, the query data, the
    oracle), and the work done for it, done at most once.

    A session is made per audit and not shared: its cached properties score the target on the
    references once (every method of the audit reads the same scores), and :meth:`thresholds`
    trains the calibration model, or loads it from the registry, only when a method asks for it.
    Frozen, so that the configuration and the target cannot change under the cached work.

    ``data`` is None when the query is a table scored by Spark: it never comes to this process.
    """

    config: AuditConfig
    target: Target
    data: ArraySet | None
    oracle: Oracle
    progress: bool

    @cached_property
    def calibration_plan(self) -> CalibrationPlan:
        """Made once per audit: every method of the audit shares it."""
        return CalibrationPlan.for_target(
            self.target,
            k=self.config.k,
            cal_seed=self.config.cal_seed,
            model_name=self.config.calibration_name,
            corruption=self.config.corruption,
        )

    @cached_property
    def nonmembers(self) -> Reference:
        """Samples the target never saw: ``--reference``, else its clean calibration set."""
        return nonmember_reference(
            self.target,
            self.config.reference_file,
            max_images=self.config.max_query,
            label_column=self.config.label_column,
        )

    @cached_property
    def nonmember_predictions(self) -> Predictions:
        """The target's predictions on the non-member reference (scored once per audit).

        Label-only predictions are one-hot over every class the reference's labels name: a model
        that never predicts the highest classes on it is still audited against those labels.
        """
        predictions = self.oracle.predict(self.nonmembers.data)
        return predictions.with_classes(max(predictions.proba.shape[1], int(self.nonmembers.data.y.max()) + 1))

    @cached_property
    def nonmember_proba(self) -> np.ndarray:
        """The target's probabilities on the non-member reference (scored once per audit)."""
        return self.nonmember_predictions.proba

    @cached_property
    def members(self) -> Reference | None:
        """Samples known to be in the target's training data, the query's own left out; None when unknown."""
        return member_reference(
            self.target,
            self.data,
            self.config.members_file,
            max_images=self.config.max_query,
            label_column=self.config.label_column,
        )

    @cached_property
    def member_proba(self) -> np.ndarray | None:
        """The target's probabilities on the member reference (scored once per audit)."""
        return None if self.members is None else self.oracle.predict_proba(self.members.data)

    @cached_property
    def member_views(self) -> np.ndarray | None:
        """The target's probabilities on the member reference and its shifts, (9, n, C) (scored once per audit)."""
        return None if self.members is None else self.views(self.members.data, self.member_proba)

    @cached_property
    def nonmember_views(self) -> np.ndarray:
        """The target's probabilities on the non-member reference and its shifts, (9, n, C) (scored once per audit)."""
        return self.views(self.nonmembers.data, self.nonmember_proba)

    def views(self, data: ArraySet, identity: np.ndarray) -> np.ndarray:
        """``identity`` (the target's probabilities on ``data``, scored already) and then those on its 8 one-pixel
        shifts, shape (9, len(data), n_classes): the shifts cost 8 queries a sample.

        Raises
        ------
        InputError
            If ``data`` is a table (:func:`~ema.data.shifts.shifted_set`).
        """
        shifted = self.oracle.predict_proba(shifted_set(data))
        return np.concatenate([identity[np.newaxis], shifted.reshape(N_SHIFT_VIEWS - 1, len(data), identity.shape[1])])

    def check_augment(self) -> None:
        """Refuse ``--augment shifts`` where it cannot run, before anything is scored or trained.

        Raises
        ------
        InputError
            On a query that is not images (a table has no pixels to shift), or with no member
            reference known (the transfer route's calibration model scores one view).
        """
        if self.config.augment == AUGMENT_NONE:
            return
        if self.data.kind != "image":
            shifted_set(self.data)  # its one-line refusal
        if self.members is None:
            raise InputError(
                f"expected a member reference with --augment {self.config.augment} (the transfer route scores one "
                f"view of each sample), got none known for {self.target.label}; give --members FILE.npz"
            )

    def augment_cost(self) -> str:
        """What ``--augment shifts`` costs the calibrated auditor in oracle queries, in words (said before scoring)."""
        sizes = {"query": len(self.data), "members": len(self.members.data), "non-members": len(self.nonmembers.data)}
        plain = sum(sizes.values())
        parts = ", ".join(f"{name} {size:,}" for name, size in sizes.items())
        return (
            f"--augment {AUGMENT_SHIFTS}: {N_SHIFT_VIEWS} views of each sample ({parts}): "
            f"{N_SHIFT_VIEWS * plain:,} oracle queries instead of {plain:,}"
        )

    def reference_tags(self) -> dict[str, str]:
        """Which references the audit used, in words."""
        members = self.members.description if self.members is not None else "none known"
        return {keys.TAG_MEMBER_REFERENCE: members, keys.TAG_NONMEMBER_REFERENCE: self.nonmembers.description}

    def thresholds(self) -> tuple[dict, dict[str, str]]:
        """EMA's thresholds and the tags saying where they came from."""
        supplied = self.config.calibration
        if supplied is not None:
            outputs = self.config.calibration_outputs or self.config.outputs
            return supplied.thresholds(self.target, outputs, self.config.max_query, self.config.label_column), {
                keys.TAG_CACHE: SOURCE_SUPPLIED,
                keys.TAG_CALIBRATION_VERSION: supplied.model_uri,
                keys.TAG_CALIBRATION_SOURCE: SOURCE_SUPPLIED,
            }
        outcome = ensure_plan(self.calibration_plan, progress=self.progress)
        return outcome.thresholds, {
            keys.TAG_CACHE: outcome.cache,
            keys.TAG_CALIBRATION_VERSION: outcome.version.uri,
            keys.TAG_CALIBRATION_SOURCE: self.target.calibration_source,
        }


@dataclass(frozen=True)
class Scored:
    """What an engine hands back to the audit: the audit's session, each auditor's result and what it scored.

    Attributes
    ----------
    session : AuditSession
    results : dict of str to AuditResult
        By method, in the order of the method's plan (:func:`ema.workflows.methods.method_plan`).
    tags : dict of str to str
        The tags the auditors and the engine produced.
    access, detected : str
        What the model returns, and how that was decided (for the run's tags).
    fingerprint : str
        The query's content hash (params and the version's audit record).
    membership : dict
        The per-sample table as artifacts: ``membership.csv``, a ``membership.parquet`` folder,
        or nothing when it was written elsewhere.
    """

    session: AuditSession
    results: dict[str, AuditResult]
    tags: dict[str, str]
    access: str
    detected: str
    fingerprint: str
    membership: dict[str, object]
