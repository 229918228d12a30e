"""Param, metric, tag and artifact names, defined once so every run lines up in the MLflow UI."""

DEFAULT_EXPERIMENT = "ema"
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
TARGET_MODEL_NAME = "ema-target"
CALIBRATION_MODEL_NAME = "ema-calibration"
TARGET_ALIAS = "target"
CALIBRATION_ALIAS = "calibration"
MODEL_ARTIFACT = "model"

# Model version tags.
TAG_RECIPE = "ema.recipe"
TAG_DATA_SOURCE = "ema.data"
TAG_DATA_SEED = "ema.data_seed"
TAG_DATA_ROOT = "ema.data_root"
TAG_DATA_FINGERPRINT = "ema.data_fingerprint"
TAG_ROLE = "ema.role"
TAG_CACHE_KEY = "ema.cache_key"
TAG_CALIBRATION_K = "ema.k"
TAG_CALIBRATION_SEED = "ema.cal_seed"
TAG_CORRUPTION = "ema.corruption"

TAG_AUDIT_PREFIX = "ema.audit."
TAG_LAST_AUDIT = "ema.last_audit"
#: On a version a grid audited: ``ema.last_grid.<grid>`` = JSON of the grid's parent run (cells do not tag it).
TAG_LAST_GRID_PREFIX = "ema.last_grid."

# Run tags.
TAG_VERDICT = "verdict"
TAG_EXPECTED_VERDICT = "expected_verdict"
TAG_CACHE = "ema.calibration_cache"
TAG_CALIBRATION_VERSION = "ema.calibration_version"
TAG_ACCESS = "ema.access"
TAG_OUTPUTS_DETECTED = "ema.outputs_detected"

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
PARAM_DATA = "data"
PARAM_DATA_SEED = "data_seed"

# Metrics.
METRIC_RHO_EMA = "rho_ema"
METRIC_RHO_EMA_KS = "rho_ema_ks"
METRIC_FLAG_RATE = "flag_rate"
METRIC_N_QUERY = "n_query"
METRIC_TRAIN_ACCURACY = "train_accuracy"
METRIC_HELD_OUT_ACCURACY = "held_out_accuracy"

# Artifacts.
ARTIFACT_THRESHOLDS = "thresholds.json"
ARTIFACT_MEMBERSHIP = "membership.csv"
ARTIFACT_SUMMARY = "summary.csv"
ARTIFACT_SUMMARY_TXT = "summary.txt"
