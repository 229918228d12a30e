"""MLflow's side of the ``ema`` model evaluator (``mlflow.models.evaluate(..., evaluators=["ema"])``).

:class:`AuditEvaluator` is the :class:`mlflow.models.evaluation.ModelEvaluator` glue: it finds
the registered version behind the model MLflow loaded, turns the evaluation table into a
query set, hands both to :meth:`AuditEvaluator.run_audit`, and then puts the audit's
results where MLflow users look for them. It runs no audit itself: the workflow layer
subclasses it (:class:`ema.workflows.evaluation.EMAEvaluator`, the class the
``mlflow.model_evaluator`` entry point names) and runs the audit workflow in ``run_audit``.
Tracking thus never imports a workflow; the workflow inherits the MLflow glue.

Runs: ``evaluate`` opens (or reuses) a run; the audit runs as a child of it, exactly as
``ema audit`` logs an audit run (params, metrics, tags, ``calibration.json``,
``membership.csv``, ``report.html``, ``figures/``), so ``ema history`` and ``ema compare``
find it. The evaluation run then receives the audit's metrics, its tags (verdict...), the
params it does not have yet, a copy of ``report.html``, and ``ema.audit_run`` naming the child;
it takes the child's name when its own is one MLflow made up (nobody chose it).
"""

from __future__ import annotations

import re
import tempfile
import time
from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.models.evaluation import EvaluationResult, ModelEvaluator
from mlflow.models.evaluation.artifacts import CsvEvaluationArtifact, JsonEvaluationArtifact, TextEvaluationArtifact
from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

from ema.data.arrays import ArraySet
from ema.data.frames import set_from_frame
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.errors import InputError
from ema.tracking import keys
from ema.tracking.runs import is_generated_name
from ema.validation import check_positive_int

#: The model type the evaluator audits (a classifier's probabilities or labels).
MODEL_TYPE = "classifier"
#: Config keys the glue reads itself; every other key goes to :meth:`AuditEvaluator.run_audit`.
GLUE_KEYS = ("model_uri",)
#: The config key bounding the table's rows, read here (before the table is converted) and passed on to the audit.
MAX_QUERY_KEY = "max_query"
#: Tags of the audit run that say what kind of run it is and who ran it: not copied to the evaluation run.
OWN_TAGS = (keys.TAG_RUN_KIND, keys.TAG_PID, keys.TAG_HOST)
#: The audit's artifacts the EvaluationResult lists (the report is also copied onto the evaluation run).
RESULT_ARTIFACTS = {
    keys.ARTIFACT_REPORT: TextEvaluationArtifact,
    keys.ARTIFACT_CALIBRATION: JsonEvaluationArtifact,
    keys.ARTIFACT_MEMBERSHIP: CsvEvaluationArtifact,
}
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class AuditEvaluator(ModelEvaluator):
    """A model evaluator that audits the evaluation data as a query set; subclasses run the audit."""

    @classmethod
    def can_evaluate(cls, *, model_type, evaluator_config, **kwargs) -> bool:
        return model_type == MODEL_TYPE

    @abstractmethod
    def checked_config(self, config: dict[str, object]) -> dict[str, object]:
        """The evaluator config, refused on an unknown key or a value of the wrong type before any work.

        Raises
        ------
        InputError
            Naming the key, what it takes and what arrived.
        """

    @abstractmethod
    def run_audit(self, model_uri: str, query: ArraySet, config: Mapping[str, object]) -> str:
        """Audit ``query`` against ``model_uri`` in a run nested under the active one; return its run id.

        ``config`` is the evaluator config without the keys in :data:`GLUE_KEYS`.
        """

    def evaluate(
        self,
        *,
        model_type,
        dataset,
        run_id,
        evaluator_config,
        model=None,
        extra_metrics=None,
        custom_artifacts=None,
        predictions=None,
        **kwargs,
    ) -> EvaluationResult:
        """Audit the evaluation data against the model; log on the evaluation run; return the audit's metrics.

        Raises
        ------
        InputError
            On a bad config (refused first, by :meth:`checked_config`), without a model (static
            predictions cannot be audited: the audit queries the model itself), when the model's
            registered version cannot be told, on a table that is not images (or, with the config's
            ``kind="table"``, features of numbers or text) with integer labels, or one of more rows than the
            config's ``max_query``. Refused for good: fix the call.
        ModelAccessError, StoreBusyError
            When the model could not be loaded or scored, or the tracking store stayed busy
            (:data:`ema.errors.RETRYABLE`): the same call may pass when tried again.
        """
        config = self.checked_config(dict(evaluator_config or {}))
        if model is None:
            raise InputError(
                "the ema evaluator audits a model, got none: pass model='models:/NAME@ALIAS' to "
                "mlflow.models.evaluate (static predictions cannot be audited)"
            )
        if not dataset.has_targets:
            raise InputError("expected the query labels: pass targets='label' (the label column's name)")
        model_uri = str(config.pop("model_uri", "") or registered_uri(model))
        name = _UNSAFE_NAME.sub("-", str(dataset.name or "query")).strip("-.") or "query"
        max_images = check_positive_int(MAX_QUERY_KEY, config.get(MAX_QUERY_KEY, DEFAULT_MAX_QUERY))
        query = set_from_frame(
            dataset.features_data,
            dataset.labels_data,
            name=name,
            max_images=max_images,
            kind=str(config.get("kind", "image")),
            allow_missing=bool(config.get("allow_missing", False)),
        )
        audit_run = self.run_audit(model_uri, query, config)
        metrics = mirror_audit_run(audit_run, run_id)
        artifact_uri = mlflow.get_run(audit_run).info.artifact_uri
        artifacts = {name: kind(uri=f"{artifact_uri}/{name}") for name, kind in RESULT_ARTIFACTS.items()}
        return EvaluationResult(metrics=metrics, artifacts=artifacts, run_id=run_id)


def registered_uri(model) -> str:
    """``models:/NAME/VERSION`` of the one registered version of a loaded pyfunc model, else ``models:/<model id>``.

    MLflow hands the evaluator the loaded model, not the URI it was given; the audit needs
    the registered version (its recipe and data tags, its audit trail).

    Raises
    ------
    InputError
        If the model has no model id, or is registered as several versions (pass ``model_uri`` in the config).
    """
    model_id = getattr(model, "model_id", None) or getattr(getattr(model, "metadata", None), "model_id", None)
    if not model_id:
        raise InputError(
            "cannot tell which model MLflow loaded (no model id): pass evaluator_config="
            "{'ema': {'model_uri': 'models:/NAME/VERSION'}}"
        )
    source = f"models:/{model_id}"
    versions = mlflow.MlflowClient().search_model_versions(f"source_path = '{source}'")
    versions = [v for v in versions if v.source == source]
    if len(versions) > 1:
        found = sorted(f"models:/{v.name}/{v.version}" for v in versions)
        raise InputError(
            f"model {model_id} is registered as {found}: pass evaluator_config={{'ema': {{'model_uri': ...}}}} "
            "with the one to audit"
        )
    return f"models:/{versions[0].name}/{versions[0].version}" if versions else source


def mirror_audit_run(audit_run: str, run_id: str) -> dict[str, float]:
    """Copy the audit run's metrics, tags, missing params and ``report.html`` onto the evaluation run.

    The evaluation run is renamed as the audit run only when its name is one MLflow generated.

    Returns the metrics.
    """
    client = mlflow.MlflowClient()
    audit = client.get_run(audit_run).data
    evaluation = client.get_run(run_id)
    own = evaluation.data.params
    tags = {k: v for k, v in audit.tags.items() if not k.startswith("mlflow.") and k not in OWN_TAGS}
    if is_generated_name(evaluation.info.run_name):
        tags[MLFLOW_RUN_NAME] = audit.tags[MLFLOW_RUN_NAME]
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(key, value, now, 0) for key, value in audit.metrics.items()],
        params=[Param(key, value) for key, value in audit.params.items() if key not in own],
        tags=[RunTag(key, value) for key, value in {**tags, keys.TAG_AUDIT_RUN: audit_run}.items()],
    )
    with tempfile.TemporaryDirectory() as tmp:
        report = mlflow.artifacts.download_artifacts(run_id=audit_run, artifact_path=keys.ARTIFACT_REPORT, dst_path=tmp)
        client.log_artifact(run_id, str(Path(report)))
    return dict(audit.metrics)
