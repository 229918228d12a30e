"""`ema unlearn --method retrain` of scikit-learn targets: by their recipe tag, or by a clone of their own estimator."""

from __future__ import annotations

import json

import mlflow
import mlflow.sklearn
import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.models import infer_signature
from mlflow.tracking import MlflowClient
from sklearn.naive_bayes import GaussianNB
from sklearn.neural_network import MLPClassifier

from ema.data.files import write_set
from ema.data.presets import load_splits
from ema.errors import EMAError
from ema.tracking import keys
from ema.training.unlearn_spec import UnlearnSpec
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.references import contains_all, member_reference, without_query
from ema.workflows.target import resolve_target
from ema.workflows.unlearn import UnlearnConfig, unlearn
from ema_cli.cli import main
from tests.conftest import module_store

#: A small MLP (a few seconds on 5,000 images); its random_state is what --seed replaces.
MLP_PARAMS = {"hidden_layer_sizes": [16], "max_iter": 15, "random_state": 7}
MLP_RECIPE = {"framework": "sklearn", "estimator": "sklearn.neural_network.MLPClassifier", "params": MLP_PARAMS}


def flat(pixels: np.ndarray) -> np.ndarray:
    return pixels.reshape(len(pixels), -1)


def register(estimator, name: str, training_file: str | None = None, recipe: dict | None = None) -> str:
    """Log and register a fitted estimator as a platform team would; its training data as a local .npz input."""
    splits = load_splits()
    x = flat(splits.train.model_inputs())
    with mlflow.start_run(run_name=f"train {name}"):
        if training_file is not None:
            dataset = mlflow.data.from_numpy(splits.train.x, targets=splits.train.y, source=training_file)
            mlflow.log_input(dataset, context="training")
        info = mlflow.sklearn.log_model(
            estimator,
            name="model",
            signature=infer_signature(x[:5], estimator.predict_proba(x[:5])),
            pyfunc_predict_fn="predict_proba",
            registered_model_name=name,
            serialization_format=mlflow.sklearn.SERIALIZATION_FORMAT_CLOUDPICKLE,
            pip_requirements=["scikit-learn"],
        )
    version = str(info.registered_model_version)
    if recipe is not None:
        MlflowClient().set_model_version_tag(name, version, keys.TAG_RECIPE, json.dumps(recipe))
    return f"models:/{name}/{version}"


def _versions(name: str) -> list[str]:
    return sorted(str(v.version) for v in MlflowClient().search_model_versions(f"name = '{name}'"))


def _failed_runs() -> int:
    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    return len(client.search_runs(experiments, filter_string="attributes.status = 'FAILED'"))


@pytest.fixture(scope="module")
def sklearn_targets(tmp_path_factory, template_db):
    """Two scikit-learn MLPs trained on M1..M5: one tagged with its recipe and logging its training .npz, one bare."""
    with module_store(tmp_path_factory, template_db, "sklearn-unlearn"):
        folder = tmp_path_factory.mktemp("sklearn-data")
        splits = load_splits()
        training = str(write_set(splits.train, folder / "train.npz"))
        retain = str(write_set(without_query(splits.train, splits.query("M1")), folder / "retain.npz"))
        estimator = MLPClassifier(**MLP_PARAMS).fit(flat(splits.train.model_inputs()), splits.train.y)
        tagged = register(estimator, "sk-recipe", training_file=training, recipe=MLP_RECIPE)
        bare = register(estimator, "sk-bare")
        yield {"tagged": tagged, "bare": bare, "retain": retain, "splits": splits}


def _cli_unlearn(*options: str):
    result = CliRunner().invoke(main, ["unlearn", "--method", "retrain", "--forget", "M1", *options, "--no-progress"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("registered "))
    return line.split()[1]


def test_retrain_of_a_sklearn_recipe_target_registers_an_unlearned_version_with_its_lineage(sklearn_targets):
    splits, m1 = sklearn_targets["splits"], sklearn_targets["splits"].query("M1")
    uri = _cli_unlearn("--model", sklearn_targets["tagged"])
    name, number = uri.removeprefix("models:/").split("/")
    client = MlflowClient()
    assert number == "2" and str(client.get_model_version_by_alias(name, keys.UNLEARNED_ALIAS).version) == number
    version = client.get_model_version(name, number)
    tags = version.tags
    assert tags[keys.TAG_ROLE] == keys.ROLE_UNLEARNED and tags[keys.TAG_UNLEARNED_FROM] == "1"
    assert tags[keys.TAG_UNLEARN_METHOD] == "retrain" and tags[keys.TAG_FORGET] == "M1"
    assert tags[keys.TAG_FORGET_FINGERPRINT] == m1.fingerprint
    assert tags[keys.TAG_DATA_FINGERPRINT] == without_query(splits.train, m1).fingerprint
    assert json.loads(tags[keys.TAG_RECIPE]) == MLP_RECIPE  # the target's recipe, as its tag says
    assert float(tags["ema.unlearn.retain_accuracy"]) > 0.8
    assert "sklearn" in mlflow.models.get_model_info(uri).flavors  # a scikit-learn model, as the target

    unlearned = resolve_target(uri)
    reference = member_reference(unlearned, m1)
    assert len(reference.data) == len(splits.train) - len(m1) and not contains_all(reference.data, m1).any()
    assert "minus the forget set M1" in reference.description
    outcome = audit(AuditConfig(model_uri=uri, query="M1", method="calibrated"), progress=False)
    run_tags = client.get_run(outcome.run_id).data.tags
    assert "minus the forget set M1" in run_tags[keys.TAG_MEMBER_REFERENCE]
    assert outcome.expected_verdict == "not_memorized"


def test_retrain_of_a_sklearn_target_is_seeded_by_seed(sklearn_targets):
    """--seed replaces the recipe's random_state: the same seed gives the same model, another seed another."""
    base = {"model_uri": sklearn_targets["tagged"], "forget": "M1", "alias": None}
    runs = [
        unlearn(UnlearnConfig(**base, spec=UnlearnSpec(method="retrain", seed=seed)), progress=False)
        for seed in (3, 3, 4)
    ]
    x = flat(sklearn_targets["splits"].held_out.model_inputs()[:200])
    proba = [mlflow.sklearn.load_model(run.version.uri).predict_proba(x) for run in runs]
    np.testing.assert_array_equal(proba[0], proba[1])
    assert not np.allclose(proba[0], proba[2])
    assert mlflow.sklearn.load_model(runs[0].version.uri).random_state == 3
    assert json.loads(runs[0].version.tags[keys.TAG_UNLEARN_SPEC])["seed"] == 3


def test_retrain_of_a_sklearn_model_without_recipe_clones_it_and_stays_auditable(sklearn_targets):
    """No recipe tag: the target's own estimator is cloned and retrained; the new version records no clone 'recipe'."""
    bare, m1 = sklearn_targets["bare"], sklearn_targets["splits"].query("M1")
    uri = _cli_unlearn("--model", bare, "--retain", sklearn_targets["retain"], "--alias", "gone", "--seed", "5")
    tags = MlflowClient().get_model_version(*uri.removeprefix("models:/").split("/")).tags
    assert keys.TAG_RECIPE not in tags and tags[keys.TAG_UNLEARNED_FROM] == "1"
    retrained = mlflow.sklearn.load_model(uri)
    assert isinstance(retrained, MLPClassifier) and retrained.random_state == 5
    assert retrained.hidden_layer_sizes == MLP_PARAMS["hidden_layer_sizes"]
    unlearned = resolve_target(uri)
    assert unlearned.calibration_source == "clone"
    reference = member_reference(unlearned, sklearn_targets["splits"].query("M6"))
    assert len(reference.data) == 4000 and not contains_all(reference.data, m1).any()


def test_retrain_refuses_a_seed_for_an_estimator_without_random_state(sklearn_targets, tmp_path):
    splits = sklearn_targets["splits"]
    training = str(write_set(splits.train, tmp_path / "train.npz"))
    recipe = {"framework": "sklearn", "estimator": "GaussianNB", "params": {}}
    uri = register(GaussianNB().fit(flat(splits.train.model_inputs()), splits.train.y), "sk-nb", training, recipe)
    failed = _failed_runs()
    with pytest.raises(
        EMAError, match=r"expected --seed 0 for sk-nb v1: its GaussianNB takes no random_state.*got --seed 1"
    ):
        unlearn(UnlearnConfig(model_uri=uri, forget="M1", spec=UnlearnSpec(method="retrain", seed=1)), progress=False)
    assert _versions("sk-nb") == ["1"] and _failed_runs() == failed + 1
    for method, epochs in (("finetune", None), ("retrain", 3)):
        with pytest.raises(EMAError, match="scikit-learn model"):
            spec = UnlearnSpec(method=method, epochs=epochs)
            unlearn(UnlearnConfig(model_uri=uri, forget="M1", spec=spec), progress=False)
    assert _versions("sk-nb") == ["1"]
