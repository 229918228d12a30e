"""What an audit is asked to do: ``AuditConfig``, built once, validated, passed down (and ``SuppliedCalibration``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ema.auditors.calibrated import CalibratedAuditor
from ema.auditors.ema import EMAAuditor
from ema.auditors.marks import MarksAuditor
from ema.auditors.reference_record import AUTO_MARGIN, DEFAULT_MARGIN, default_certify_level
from ema.data.corruption import CORRUPTIONS, DEFAULT_CORRUPTION, check_quality, corruption_as_applied
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.shifts import AUGMENT_NONE, AUGMENTATIONS
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import InputError
from ema.image_shapes import DEFAULT_PIXEL_ORDER, PIXEL_ORDERS
from ema.inputs import INPUT_DTYPES, InputTransform
from ema.oracle import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_TIMEOUT,
    HTTP_FORMATS,
    OUTPUT_KINDS,
    PyfuncOracle,
)
from ema.stats import EMA_TESTS
from ema.thresholds import THRESHOLD_MODES
from ema.tracking import keys
from ema.training.devices import CPU, describe_device, resolve_device
from ema.training.recipes import load_recipe
from ema.validation import (
    check_certify_level,
    check_choice,
    check_finite,
    check_model_name,
    check_open_unit,
    check_positive_int,
    check_seed,
    redact_url,
)
from ema.workflows.calibrate import SUPPLIED_CALIBRATION_ADVICE, CalibrationHelper, warn_small_classes
from ema.workflows.engines import ENGINE_IN_PROCESS, check_engine
from ema.workflows.methods import METHODS, certifies_margin, check_engine_runs, method_plan, methods_certifying
from ema.workflows.target import SOURCE_SUPPLIED, Target

#: Clean images a marks audit queries by default (each twice: clean and stamped).
DEFAULT_MARK_QUERIES = 200
#: EMA's test of the query's flags, by default (``--test``): Welch's t-test, as the paper's.
AUDIT_TEST_DEFAULT = EMA_TESTS[0]


@dataclass(frozen=True)
class SuppliedCalibration:
    """An already-trained calibration model and the calibration samples it was / was not trained on."""

    model_uri: str
    members_file: str
    nonmembers_file: str

    def helper(
        self,
        target: Target,
        outputs: str = "auto",
        max_images: int = DEFAULT_MAX_QUERY,
        label_column: str = DEFAULT_LABEL_COLUMN,
    ) -> CalibrationHelper:
        """The model, returning ``outputs`` and scoring on the target's device with its input transform, with its
        members and non-members, each read only when it holds at most ``max_images`` samples (a table's labels in
        ``label_column``) and resized as the target's sets are."""
        model = PyfuncOracle(self.model_uri, transform=target.transform, outputs=outputs, device=target.device)
        model.input_spec = target.declared(model.input_spec)  # trained like the target: the same shape, pixel order
        members, nonmembers = (
            target.read_set(path, role=role, max_images=max_images, label_column=label_column)
            for path, role in (
                (self.members_file, "calibration members file (--calibration-members)"),
                (self.nonmembers_file, "calibration non-members file (--calibration-nonmembers)"),
            )
        )
        for data, path in ((members, self.members_file), (nonmembers, self.nonmembers_file)):
            warn_small_classes(data, f"calibration set {path}", SUPPLIED_CALIBRATION_ADVICE)
        tags = {
            keys.TAG_CACHE: SOURCE_SUPPLIED,
            keys.TAG_CALIBRATION_VERSION: self.model_uri,
            keys.TAG_CALIBRATION_SOURCE: SOURCE_SUPPLIED,
        }
        return CalibrationHelper(model, members, nonmembers, tags)


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
    query_file_temporary
        The query file is a temporary copy of data held elsewhere (the evaluator's DataFrame), deleted after the
        audit: report.html then says that no command reruns the audit as it is, and how to keep the file.
    label_column
        The label column of every table file the audit reads (query, references, calibration).
    allow_missing
        Keep the missing numbers (empty cells, nulls, NaN) of every table the audit reads (query,
        references, calibration) and send them to the model as NaN, for a model whose own pipeline
        imputes them; False refuses such a table. Infinite numbers are refused either way, and the
        workbench's own recipes never train a calibration model on missing cells.
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
    outputs, output_name, recipe_file, transform, input_shape, input_dtype, pixel_order
        What the model returns (and which of its named outputs to read), how the calibration
        model is trained, how inputs are scaled, the model's input shape and type (overriding its
        signature's), and how colour images flattened to fit it are ordered (``"chw"`` channel by
        channel, ``"hwc"`` pixel by pixel: :mod:`ema.image_shapes`).
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
        upper confidence bound at ``certify_level`` (None: 1 - alpha / 2) is at most ``margin``
        (None: :data:`~ema.auditors.reference_record.DEFAULT_MARGIN`);
        ``margin="auto"``: at the audit's own certifiable margin (the smallest it certifies with
        probability 0.85 for a removed query of this size, known before the query is scored).
        Given to a method that certifies no margin (:func:`~ema.workflows.methods.certifies_margin`),
        either is refused: it would change nothing.
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
    figures
        Draw report.html's figures (each method's score distributions, the ROC curves) and log
        them under ``figures/`` as SVG. False leaves them out: the verdict, the numbers and the
        rest of the report are the same, and nothing is drawn (a few hundredths of a second).
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
    query_file_temporary: bool = False
    label_column: str = DEFAULT_LABEL_COLUMN
    allow_missing: bool = False
    calibration_file: str | None = None
    method: str = "ema"
    test: str = AUDIT_TEST_DEFAULT
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
    pixel_order: str = DEFAULT_PIXEL_ORDER
    image_size: int | None = None
    calibration: SuppliedCalibration | None = None
    calibration_outputs: str | None = None
    reference_file: str | None = None
    members_file: str | None = None
    augment: str = AUGMENT_NONE
    margin: float | str | None = None
    certify_level: float | None = None
    mark_key: str | None = None
    queries: int | None = None
    max_query: int = DEFAULT_MAX_QUERY
    strict: bool = False
    figures: bool = True
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
    def resolved_margin(self) -> float | str:
        """The margin ``not_memorized`` is certified below: as given, else the default."""
        return DEFAULT_MARGIN if self.margin is None else self.margin

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
        check_choice("pixel order", self.pixel_order, PIXEL_ORDERS)
        if self.calibration_outputs is not None:
            check_choice("calibration outputs", self.calibration_outputs, OUTPUT_KINDS)
            if self.calibration is None:
                raise InputError(
                    "expected --calibration-outputs only with --calibration-model, got no calibration model"
                )
        check_choice("corruption", self.corruption, tuple(CORRUPTIONS))
        check_open_unit("alpha", self.alpha)
        check_quality(self.k)
        check_seed("cal_seed", self.cal_seed)
        if self.recipe_file is not None:
            load_recipe(self.recipe_file)  # a recipe refused now leaves no run
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
        self._check_certify_options()
        self._check_test()
        self._check_marks()
        check_positive_int("max query", self.max_query)
        check_positive_int("HTTP concurrency", self.http_concurrency)
        check_choice("HTTP format", self.http_format, HTTP_FORMATS)
        return self

    def changed(self, options: dict[str, str]) -> dict[str, object]:
        """Of ``options`` (option -> field), those given other than their defaults (option -> value)."""
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        return {flag: getattr(self, name) for flag, name in options.items() if getattr(self, name) != defaults[name]}

    @property
    def certify_options(self) -> dict[str, object]:
        """``--margin`` and ``--certify-level`` as given (option -> value), those left at their defaults out."""
        given = {"--margin": self.margin, "--certify-level": self.certify_level}
        return {flag: value for flag, value in given.items() if value is not None}

    def _check_certify_options(self) -> None:
        """``--margin`` and ``--certify-level`` in range, and only with a method whose verdict they change."""
        given = self.certify_options
        if given and not certifies_margin(self.method):
            options = " ".join(f"{flag} {value}" for flag, value in given.items())
            raise InputError(
                f"expected {' and '.join(given)} with a method that certifies a margin "
                f"({', '.join(methods_certifying())}), got {options} with --method {self.method}: it would change "
                "nothing"
            )
        if self.margin not in (None, AUTO_MARGIN):
            check_open_unit("margin", self.margin)
        if self.certify_level is not None:
            check_certify_level(self.certify_level)

    def _check_test(self) -> None:
        """``--test`` other than the default only with a method that runs EMA, whose test it is."""
        runs_ema = EMAAuditor.method in method_plan(self.method)
        if self.test != AUDIT_TEST_DEFAULT and not runs_ema:
            with_ema = ", ".join(name for name in METHODS if EMAAuditor.method in method_plan(name))
            raise InputError(
                f"expected --test with a method that runs EMA ({with_ema}), got --test {self.test} with --method "
                f"{self.method}: it would change nothing"
            )

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
        """The run's params: the options, and the target as resolved; those that depend on the query's kind are
        :meth:`query_params`."""
        return {
            keys.PARAM_METHOD: self.method,
            keys.PARAM_TEST: self.test,
            keys.PARAM_ALPHA: self.alpha,
            keys.PARAM_QUERY: self.query_name,
            keys.PARAM_K: self.k,
            keys.PARAM_CAL_SEED: self.cal_seed,
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
            # a method that certifies no margin logs them empty: it used neither
            keys.PARAM_MARGIN: self.resolved_margin if certifies_margin(self.method) else "",
            keys.PARAM_CERTIFY_LEVEL: self.resolved_certify_level if certifies_margin(self.method) else "",
            keys.PARAM_STRICT: self.strict,
            keys.PARAM_ENGINE: self.engine,
            keys.PARAM_LABEL_COLUMN: self.label_column,
            keys.PARAM_ALLOW_MISSING: self.allow_missing,
            keys.PARAM_DEVICE: describe_device(target.device),
            # only when given: under `mlflow run` the project logs its own empty default ('') first
            **({keys.PARAM_CALIBRATION_FILE: self.calibration_file} if self.calibration_file else {}),
            **({keys.PARAM_QUERIES: self.query_limit} if self.query_limit is not None else {}),
            **{key: value for key, value in self._given_sources().items() if value},
        }

    def query_params(self, target: Target, kind: str) -> dict[str, object]:
        """The params that depend on the query's ``kind`` (``"image"`` or ``"table"``), logged once it is read.

        The corruption as the calibration set gets it: a table's rows get Gaussian noise only, whatever
        ``--corruption`` names (:func:`~ema.data.corruption.corruption_as_applied`). The pixel order and
        the pixel scaling only for images: a table has neither (the options are refused for one), and a
        run comparing tables should not show a rotation or a pixel layout it never had.
        """
        corruption = {keys.PARAM_CORRUPTION: corruption_as_applied(self.corruption, kind)}
        if kind == "table":
            return corruption
        return {
            **corruption,
            keys.PARAM_PIXEL_ORDER: self.pixel_order,
            keys.PARAM_INPUT_TRANSFORM: target.transform.describe(exact=True),
        }

    def _given_sources(self) -> dict[str, object]:
        """What changes a verdict besides the options above, by param: the files and models given, the image size."""
        supplied = self.calibration
        return {
            keys.PARAM_IMAGE_SIZE: self.image_size,
            # absolute: one file shows alike however it was named, two files of one name apart
            keys.PARAM_RECIPE_FILE: absolute_path(self.recipe_file),
            keys.PARAM_REFERENCE_FILE: absolute_path(self.reference_file),
            keys.PARAM_MEMBERS_FILE: absolute_path(self.members_file),
            keys.PARAM_CALIBRATION_MODEL: redact_url(supplied.model_uri) if supplied else None,
        }

    def resolved_device(self) -> AuditConfig:
        """This configuration with its device resolved on this machine (``auto`` -> ``cuda:N`` or ``cpu``).

        Raises
        ------
        InputError
            If the device is not one of the accepted forms, or names CUDA this machine lacks.
        """
        return dataclasses.replace(self, device=resolve_device(self.device))


def absolute_path(path: str | None) -> str | None:
    """A file path as its absolute form; what names no file here (a named recipe, such as ``paper-medical``, a
    remote URI) as it is; None as None."""
    if path is None or not Path(path).exists():
        return path
    return str(Path(path).resolve())
