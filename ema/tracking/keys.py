"""Param, metric, tag and artifact names, defined once so every run lines up in the MLflow UI."""

DEFAULT_EXPERIMENT = "ema"
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
TARGET_MODEL_NAME = "ema-target"
CALIBRATION_MODEL_NAME = "ema-calibration"
TARGET_ALIAS = "target"
#: The alias ``ema unlearn`` points at the version it registers, unless told another.
UNLEARNED_ALIAS = "unlearned"
CALIBRATION_ALIAS = "calibration"
MODEL_ARTIFACT = "model"

# Model version tags.
TAG_RECIPE = "ema.recipe"
TAG_DATA_SOURCE = "ema.data"
TAG_DATA_SEED = "ema.data_seed"
TAG_DATA_ROOT = "ema.data_root"
#: The image format a binary source was read in (``--image-size``, ``--channels``), when given.
TAG_DATA_IMAGE_SIZE = "ema.data_image_size"
TAG_DATA_CHANNELS = "ema.data_channels"
#: A table file's label column (``ema train --data-file``).
TAG_LABEL_COLUMN = "ema.label_column"
TAG_DATA_FINGERPRINT = "ema.data_fingerprint"
TAG_ROLE = "ema.role"
TAG_CACHE_KEY = "ema.cache_key"
TAG_CALIBRATION_K = "ema.k"
TAG_CALIBRATION_SEED = "ema.cal_seed"
TAG_CORRUPTION = "ema.corruption"
#: ``ema.role`` of a target ``ema train`` registered, and of a version ``ema unlearn`` registered.
ROLE_TARGET = "target"
ROLE_UNLEARNED = "unlearned"
#: On an unlearned version: the version of the same model it was unlearned from, the method, its
#: hyperparameters (JSON), the forget set's name and fingerprint, and the unlearn run's numbers
#: (``ema.unlearn.<metric>``). Its ``ema.data_fingerprint`` is that of the retained data.
TAG_UNLEARNED_FROM = "ema.unlearned_from"
TAG_UNLEARN_METHOD = "ema.unlearn.method"
TAG_UNLEARN_SPEC = "ema.unlearn.spec"
TAG_UNLEARN_PREFIX = "ema.unlearn."
TAG_FORGET = "ema.forget"
TAG_FORGET_FINGERPRINT = "ema.forget_fingerprint"

TAG_AUDIT_PREFIX = "ema.audit."
TAG_LAST_AUDIT = "ema.last_audit"
#: On a version a grid audited: ``ema.last_grid.<grid>`` = JSON of the grid's parent run (cells do not tag it).
TAG_LAST_GRID_PREFIX = "ema.last_grid."
#: On a registered model: ``ema.claim.<cache key>`` = the lease of the process building that cache entry.
TAG_CLAIM_PREFIX = "ema.claim."

# Run tags.
TAG_RUN_NAME = "mlflow.runName"
TAG_PARENT_RUN = "mlflow.parentRunId"
#: The tag MLflow puts on a logged dataset input to say what the run used it for.
TAG_DATASET_CONTEXT = "mlflow.data.context"
TAG_VERDICT = "verdict"
#: An audit's methods in the order its plan ran them, comma-separated: the first gives the run's verdict.
TAG_METHODS = "ema.methods"
#: What a run is (``audit`` for audit runs), and which process on which host runs it.
TAG_RUN_KIND = "ema.run_kind"
#: Set on an ``mlflow.models.evaluate`` run: the id of the audit run nested under it, whose results it mirrors.
TAG_AUDIT_RUN = "ema.audit_run"
RUN_KIND_AUDIT = "audit"
#: Set when an audit's run starts: the registered model it audits, before its params say so (``ema history --all``
#: lists an audit killed in between by it).
TAG_AUDITED_MODEL = "ema.audited_model"
#: Set on a run that ended FAILED: why, in one line (an error's message; another exception's type and message).
TAG_ERROR = "ema.error"
TAG_PID = "ema.pid"
TAG_HOST = "ema.host"
TAG_EXPECTED_VERDICT = "expected_verdict"
TAG_CACHE = "ema.calibration_cache"
#: How the calibration model came to be: clone (the target's own architecture), recipe or supplied.
TAG_CALIBRATION_SOURCE = "ema.calibration_source"
TAG_CALIBRATION_VERSION = "ema.calibration_version"
TAG_ACCESS = "ema.access"
TAG_OUTPUTS_DETECTED = "ema.outputs_detected"
TAG_KS_RATIO_CACHE = "ema.ks_ratio_cache"
TAG_REFERENCE = "ema.reference"
TAG_MEMBER_REFERENCE = "ema.member_reference"
TAG_NONMEMBER_REFERENCE = "ema.nonmember_reference"
#: The calibrated auditor's route: the member reference scored on the target, or transfer from f_cal.
TAG_CALIBRATED_ROUTE = "ema.calibrated_route"
#: Which auditor `ema power` planned a detection for: the member reference, or transfer (none known).
TAG_POWER_ROUTE = "ema.power_route"
#: What ``--augment shifts`` cost: the oracle queries of the calibrated auditor, with and without the views.
TAG_AUGMENT_COST = "ema.augment_cost"
#: JSON list of the audit's warnings (``[]`` when none).
TAG_WARNINGS = "ema.warnings"
TAG_STRICT = "ema.strict"
#: Set when the gates found the audit's inputs surely wrong (labels in another order, another scaling): every
#: verdict is inconclusive; the value says what was found.
TAG_WITHHELD = "ema.verdict_withheld"
#: Where the query was scored: in-process or spark.
TAG_ENGINE = "ema.engine"
#: Where a Spark audit wrote its membership table (--membership-out), when not logged as an artifact.
TAG_MEMBERSHIP_URI = "ema.membership_uri"
#: The evaluator's evaluation run: the resolved path where it kept the query table (its ``query_file``).
TAG_QUERY_FILE = "ema.query_file"
#: Grid parent runs: the grid's name, and the hash of everything that decides a cell's numbers.
TAG_GRID = "ema.grid"
TAG_GRID_CONFIG = "ema.grid.config"

# Params.
PARAM_METHOD = "method"
PARAM_TEST = "test"
PARAM_ALPHA = "alpha"
PARAM_QUERY = "query"
PARAM_QUERY_FINGERPRINT = "query_fingerprint"
PARAM_K = "k"
PARAM_CAL_SEED = "cal_seed"
PARAM_CORRUPTION = "corruption"
PARAM_MODEL_URI = "model_uri"
PARAM_MODEL_URL = "model_url"
PARAM_MODEL_NAME = "model_name"
PARAM_MODEL_VERSION = "model_version"
PARAM_RECIPE = "recipe"
PARAM_THRESHOLD_MODE = "threshold_mode"
PARAM_OUTPUTS = "outputs"
PARAM_OUTPUT_NAME = "output_name"
PARAM_CALIBRATION_OUTPUTS = "calibration_outputs"
PARAM_INPUT_SHAPE = "input_shape"
PARAM_INPUT_DTYPE = "input_dtype"
PARAM_PIXEL_ORDER = "pixel_order"
PARAM_DATA = "data"
PARAM_DATA_SEED = "data_seed"
PARAM_LABEL_COLUMN = "label_column"
#: Audit runs: whether tables' missing numbers went to the model as NaN (``--allow-missing``), and, with it, how many
#: cells of each set read were missing, as ``missing_cells.<set>`` (query, calibration, members, nonmembers).
PARAM_ALLOW_MISSING = "allow_missing"
PARAM_MISSING_CELLS_PREFIX = "missing_cells."
PARAM_CALIBRATION_FILE = "calibration_file"
PARAM_INPUT_TRANSFORM = "input_transform"
PARAM_IMAGE_SIZE = "image_size"
PARAM_RECIPE_FILE = "recipe_file"
PARAM_REFERENCE_FILE = "reference_file"
PARAM_MEMBERS_FILE = "members_file"
PARAM_CALIBRATION_MODEL = "calibration_model"
#: The most query images audited (``--queries``, the marks method's default).
PARAM_QUERIES = "queries"
#: The content fingerprint of the marked copy a mark key was made for (the key itself is never logged).
TAG_MARKED_FINGERPRINT = "ema.marked_fingerprint"
#: A target trained on an owner's file in place of a fold records the file's fingerprint as ``ema.data_fold.<FOLD>``.
TAG_DATA_FOLD_PREFIX = "ema.data_fold."
#: ... its path as the tag ``ema.data_fold_file.<FOLD>`` (its splits are found again from it), and as the param
#: ``fold.<FOLD>``.
TAG_DATA_FOLD_FILE_PREFIX = "ema.data_fold_file."
PARAM_FOLD_PREFIX = "fold."
PARAM_N_QUERY = "n_query"
PARAM_POWER = "power"
PARAM_GRID = "grid"
PARAM_SAMPLE_SEED = "sample_seed"
PARAM_GRID_KS = "grid_ks"
PARAM_GRID_QUERIES = "grid_queries"
PARAM_GRID_SIZES = "grid_sizes"
PARAM_WORKERS = "workers"
PARAM_ARCH = "arch"
PARAM_EPOCHS = "epochs"
#: A grid's target's epochs as trained (``epochs`` is the option as given: 0 for the paper's).
PARAM_TARGET_EPOCHS = "target_epochs"
PARAM_TARGET_URI = "target_uri"
PARAM_SIZES = "sizes"
PARAM_N_DRAWS = "n_draws"
PARAM_N_KS_DRAWS = "n_ks_draws"
PARAM_SEED = "seed"
PARAM_MARGIN = "margin"
PARAM_CERTIFY_LEVEL = "certify_level"
#: Audit runs: the views of each sample the calibrated auditor scored (``none`` or ``shifts``).
PARAM_AUGMENT = "augment"
PARAM_CERTIFY_PROBABILITY = "certify_probability"
PARAM_MAX_REFERENCE = "max_reference"
PARAM_STRICT = "strict"
#: Unlearn runs: the forget set, the version unlearned, and the method's options as ``unlearn.<field>``.
PARAM_FORGET = "forget"
PARAM_FORGET_FINGERPRINT = "forget_fingerprint"
PARAM_UNLEARN_PREFIX = "unlearn."
PARAM_N_RETAIN = "n_retain"
PARAM_N_FORGET = "n_forget"
PARAM_SEEDS = "seeds"
#: Unlearning grid: seeds of the non-member references redrawn for the forget set's audits.
PARAM_REFERENCE_SEEDS = "reference_seeds"
PARAM_METHODS = "methods"
#: Where the query was scored (ema.workflows.engines.ENGINES), and on which Spark master.
PARAM_ENGINE = "engine"
PARAM_SPARK_MASTER = "spark_master"
#: Where torch trained and scored in the run's process: ``cpu``, or ``cuda:N (the card's name)``.
PARAM_DEVICE = "device_used"

# Metrics.
METRIC_RHO_EMA = "rho_ema"
METRIC_RHO_EMA_KS = "rho_ema_ks"
METRIC_FLAG_RATE = "flag_rate"
#: The run's verdict as a number (``ema.auditors.result.VERDICT_CODES``); each method's as ``verdict_code.<method>``,
#: as the tags are ``verdict`` and ``verdict.<method>``.
METRIC_VERDICT_CODE = "verdict_code"
METRIC_N_QUERY = "n_query"
#: Metrics several methods log, each its own number (EMA's flags are not the calibrated auditor's): an audit run logs
#: every method's as ``<key>.<method>`` (``flag_rate.ema``, ``flag_rate.calibrated``), and the first method's also as
#: ``<key>``, so that a key means one method's number in every run.
METRICS_PER_METHOD = (METRIC_FLAG_RATE, METRIC_N_QUERY)
METRIC_TRAIN_ACCURACY = "train_accuracy"
METRIC_HELD_OUT_ACCURACY = "held_out_accuracy"
METRIC_RHO_KS = "rho_ks"
METRIC_CALIBRATION_BA_PREFIX = "calibration_ba_"
METRIC_N_REQUIRED = "n_required"
METRIC_POWER_REACHED = "power_reached"
#: ``ema power --certify``: the plan's sizes, the information behind it, the margin floor.
METRIC_CERTIFY_QUERY_SIZE = "certify_query_size"
METRIC_CERTIFY_REFERENCE_SIZE = "certify_reference_size"
METRIC_INFORMATION = "information"
METRIC_SMALLEST_REACHABLE_MARGIN = "smallest_reachable_margin"
METRIC_N_CORRECT_VERDICTS = "n_correct_verdicts"
METRIC_N_CORRECT_CALIBRATED = "n_correct_calibrated_verdicts"
METRIC_N_CELLS = "n_cells"
METRIC_N_AUDITED = "n_audited"
METRIC_N_REUSED = "n_reused"
METRIC_WALL_SECONDS = "wall_seconds"
#: Unlearn runs: accuracy on the retained data, the forget set and held-out test data; the method's wall time.
METRIC_RETAIN_ACCURACY = "retain_accuracy"
METRIC_FORGET_ACCURACY = "forget_accuracy"
METRIC_TEST_ACCURACY = "test_accuracy"
METRIC_UNLEARN_SECONDS = "unlearn_seconds"

# Artifacts.
#: Each auditor's calibration: thresholds, their balanced accuracies, diagnostics and assumptions.
ARTIFACT_CALIBRATION = "calibration.json"
ARTIFACT_MEMBERSHIP = "membership.csv"
#: The Spark engine's membership table: a Parquet folder with the columns of membership.csv.
ARTIFACT_MEMBERSHIP_PARQUET = "membership.parquet"
ARTIFACT_SUMMARY = "summary.csv"
ARTIFACT_SUMMARY_TXT = "summary.txt"
ARTIFACT_TABLES_MD = "tables.md"
ARTIFACT_TABLES_HTML = "tables.html"
ARTIFACT_CELLS = "cells.csv"
ARTIFACT_GRID_CONFIG = "grid.json"
ARTIFACT_FIG2 = "fig2_signals.png"
ARTIFACT_FIG3 = "fig3_ks_outputs.png"
ARTIFACT_ERROR_RATES_PNG = "error_rates.png"
ARTIFACT_ERROR_RATES_CSV = "error_rates.csv"
ARTIFACT_ERROR_RATES_MD = "error_rates.md"
#: The run's page for people (audits and grid parents), and the folder of its figures as PNG files.
ARTIFACT_REPORT = "report.html"
ARTIFACT_FIGURES_DIR = "figures"
#: The forget set of an unlearn run (``x``, ``y``, ``index``): the lineage the member reference subtracts.
ARTIFACT_FORGET = "forget.npz"
#: The unlearning grid's figure: how often a trace is detected, by method and |D_q|.
ARTIFACT_TRACES_PNG = "unlearning_traces.png"
