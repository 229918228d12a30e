"""Recipes and registry tags are data: nothing they name outside scikit-learn's classifier registry runs.

Each trick must be refused with one line that says what was expected and what arrived,
and the canary file the trick would create must never appear.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.errors import InputError
from ema.tracking import keys
from ema.training.allow_list import TORCH_FIELD_TYPES, sklearn_classifiers
from ema.training.recipes import SklearnRecipe, load_recipe, recipe_from_dict, recipe_from_json
from ema.training.spec import TrainSpec
from ema_cli.cli import main

SHELL = "sklearn.utils._testing.check_output"


def sklearn_recipe(estimator, params=None) -> dict:
    return {"framework": "sklearn", "estimator": estimator, "params": params or {}}


def canary_recipes(canary) -> dict[str, tuple[dict, str]]:
    """name -> (recipe, regex the one-line error must match)."""
    touch = ["sh", "-c", f"touch {canary}"]
    not_a_classifier = r"expected 'estimator' to name a scikit-learn classifier .* got "
    return {
        "function": (sklearn_recipe(SHELL, {"args": touch}), not_a_classifier + repr(SHELL)),
        "function by bare name": (sklearn_recipe("check_output", {"args": touch}), not_a_classifier + "'check_output'"),
        "module": (sklearn_recipe("sklearn.utils"), not_a_classifier + "'sklearn.utils'"),
        "outside sklearn": (sklearn_recipe("os.system", {"command": f"touch {canary}"}), not_a_classifier),
        "class outside the list": (sklearn_recipe("sklearn.preprocessing.StandardScaler"), not_a_classifier),
        "pipeline": (sklearn_recipe("sklearn.pipeline.Pipeline", {"steps": [["a", SHELL]]}), not_a_classifier),
        "non-estimator class": (sklearn_recipe("sklearn.utils.Bunch"), not_a_classifier + "'sklearn.utils.Bunch'"),
        "dotted path with ..": (sklearn_recipe("sklearn..utils._testing.check_output"), not_a_classifier),
        "classifier path with ..": (sklearn_recipe("sklearn.linear_model..LogisticRegression"), not_a_classifier),
        "private path": (sklearn_recipe("sklearn.linear_model._logistic.LogisticRegression"), not_a_classifier),
        "estimator not a string": (sklearn_recipe({"py/function": SHELL}), r"expected 'estimator' as the name .* got"),
        "no predict_proba": (
            sklearn_recipe("sklearn.linear_model.RidgeClassifier"),
            r"expected a classifier with predict_proba, got sklearn.linear_model.RidgeClassifier",
        ),
        "predict_proba switched off": (sklearn_recipe("SVC"), r"expected a classifier with predict_proba, got SVC"),
        "unknown parameter": (
            sklearn_recipe("LogisticRegression", {"args": touch}),
            r"unknown parameters \['args'\] for LogisticRegression; expected a subset of \[",
        ),
        "nested parameter": (
            sklearn_recipe("BaggingClassifier", {"estimator__args": touch}),
            r"unknown parameters \['estimator__args'\] for BaggingClassifier",
        ),
        "parameter as a mapping": (
            sklearn_recipe("LogisticRegression", {"C": {"py/object": SHELL, "args": touch}}),
            r"expected parameter 'C' as a JSON scalar .* got \{'py/object'.* \(dict\)",
        ),
        "parameter list of mappings": (
            sklearn_recipe("LogisticRegression", {"class_weight": [{"py/function": SHELL}]}),
            r"expected parameter 'class_weight' as a JSON scalar .* \(dict\)",
        ),
        "parameter naming a callable": (
            sklearn_recipe("BaggingClassifier", {"estimator": SHELL}),
            r"invalid parameters for BaggingClassifier: The 'estimator' parameter .* Got 'sklearn.utils._testing",
        ),
        "kernel naming a callable": (
            sklearn_recipe("SVC", {"kernel": SHELL, "probability": True}),
            r"invalid parameters for SVC: The 'kernel' parameter",
        ),
        "params not a mapping": (
            sklearn_recipe("LogisticRegression", [SHELL]),
            r"expected 'params' as a mapping .* got \[.*\(list\)",
        ),
        "non-finite parameter": (
            sklearn_recipe("LogisticRegression", {"C": float("nan")}),
            r"expected parameter 'C' as a finite number, got nan",
        ),
        "torch field of the wrong type": (
            {"framework": "torch", "lr": SHELL, "epochs": True},
            r"invalid training recipe: expected lr as a finite number, got 'sklearn.*\(str\); "
            r"epochs as an integer <= \d+, got True \(bool\)",
        ),
        "torch unknown field": ({"framework": "torch", "__class__": SHELL}, r"unknown training recipe fields"),
        "torch huge layer": ({"hidden": [10**12]}, r"expected hidden as a list of 1 to \d+ integer widths"),
        "input with unknown key": (
            {"input": {"__init__": SHELL}},
            r"expected 'input' as a mapping with keys among \['scale', 'mean', 'std'\], got",
        ),
        "input of the wrong type": ({"input": {"scale": SHELL}}, r"expected input scale as a finite number, got"),
        "framework not a string": ({"framework": [SHELL]}, r"expected framework in \('torch', 'sklearn'\), got \["),
    }


CASES = sorted(canary_recipes("CANARY"))


def assert_one_line_refusal(excinfo, match: str) -> None:
    message = str(excinfo.value)
    assert "\n" not in message, message
    assert excinfo.match(match)


@pytest.mark.parametrize("name", CASES)
def test_recipe_from_dict_refuses_trick(tmp_path, name):
    canary = tmp_path / "CANARY"
    recipe, match = canary_recipes(canary)[name]
    with pytest.raises(InputError) as excinfo:
        recipe_from_dict(recipe)
    assert_one_line_refusal(excinfo, match)
    assert not canary.exists()


@pytest.mark.parametrize("name", CASES)
def test_load_recipe_refuses_trick_in_a_json_file(tmp_path, name):
    canary = tmp_path / "CANARY"
    recipe, match = canary_recipes(canary)[name]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(recipe))
    with pytest.raises(InputError) as excinfo:
        load_recipe(path)
    assert_one_line_refusal(excinfo, match)
    assert not canary.exists()


@pytest.mark.parametrize(
    "text",
    [
        "!!python/object/apply:os.system ['touch {canary}']",
        "framework: sklearn\nestimator: !!python/object/apply:os.system ['touch {canary}']\n",
        "framework: sklearn\nestimator: LogisticRegression\n"
        "params:\n  C: !!python/object/apply:os.system ['touch {canary}']\n",
        "framework: sklearn\nestimator: !!python/name:sklearn.utils._testing.check_output\n",
        "framework: sklearn\nestimator: !!python/module:os\n",
    ],
)
def test_load_recipe_refuses_yaml_python_tags(tmp_path, text):
    canary = tmp_path / "CANARY"
    path = tmp_path / "r.yaml"
    path.write_text(text.format(canary=canary))
    with pytest.raises(InputError) as excinfo:
        load_recipe(path)
    assert_one_line_refusal(excinfo, r"r.yaml: expected a YAML recipe of plain mappings and values: .*python/")
    assert not canary.exists()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{1: 2}", r"expected a recipe with string keys"),
        ("framework: sklearn\nestimator: LogisticRegression\nparams: !!set {C}\n", r"expected 'params' as a mapping"),
        ("- framework: torch\n", r"expected a recipe as a mapping, got list"),
        ("[" * 100_000, r"expected a YAML recipe"),
    ],
)
def test_load_recipe_refuses_yaml_shapes(tmp_path, text, match):
    path = tmp_path / "r.yml"
    path.write_text(text)
    with pytest.raises(InputError) as excinfo:
        load_recipe(path)
    assert_one_line_refusal(excinfo, match)


def test_load_recipe_refuses_binary_deep_and_huge_files(tmp_path):
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="expected a recipe as UTF-8 text"):
        load_recipe(tmp_path / "bin.json")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="expected a recipe as JSON"):
        load_recipe(tmp_path / "deep.json")
    (tmp_path / "huge.json").write_text(" " * (2 << 20))
    with pytest.raises(InputError, match=r"expected a recipe file of at most \d+ bytes, got \d+ bytes"):
        load_recipe(tmp_path / "huge.json")


def test_sklearn_recipe_accepts_class_name_and_public_path():
    by_name = recipe_from_dict(sklearn_recipe("LogisticRegression", {"C": 0.5, "max_iter": 50, "class_weight": None}))
    by_path = recipe_from_dict(sklearn_recipe("sklearn.linear_model.LogisticRegression", {"C": 0.5}))
    assert type(by_name.build()) is type(by_path.build())
    mlp = recipe_from_dict(sklearn_recipe("MLPClassifier", {"hidden_layer_sizes": [8, 4]}))
    assert mlp.build().hidden_layer_sizes == [8, 4]
    assert recipe_from_json(json.dumps(mlp.to_dict())) == mlp
    assert SklearnRecipe("SVC", {"probability": True}).build().probability is True


def test_sklearn_allow_list_is_classifiers_with_public_paths_only():
    allowed = sklearn_classifiers()
    assert "sklearn.linear_model.LogisticRegression" in allowed and "LogisticRegression" in allowed
    assert all(".." not in name and "._" not in name for name in allowed)
    assert all(name.startswith("sklearn.") or "." not in name for name in allowed)
    assert SHELL not in allowed and "check_output" not in allowed


def test_torch_field_types_cover_train_spec():
    assert set(TORCH_FIELD_TYPES) == set(TrainSpec().to_dict())


def test_calibrate_cli_refuses_recipe_file_without_running_it(store, tmp_path):
    canary = tmp_path / "CANARY"
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps(sklearn_recipe(SHELL, {"args": ["sh", "-c", f"touch {canary}"]})))
    result = CliRunner().invoke(
        main, ["calibrate", "--model", str(tmp_path / "model"), "--recipe", str(recipe), "--no-progress"]
    )
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if "INFO mlflow" not in line and line.strip()]
    assert len(errors) == 1 and errors[0].startswith("Error: expected 'estimator' to name a scikit-learn"), errors
    assert not canary.exists()


def test_audit_cli_refuses_recipe_in_a_registry_tag_without_running_it(store, tmp_path):
    canary = tmp_path / "CANARY"
    recipe = sklearn_recipe(SHELL, {"args": ["sh", "-c", f"touch {canary}"]})
    client = MlflowClient()
    client.create_registered_model("planted")
    client.create_model_version(
        "planted", source=(tmp_path / "model").as_uri(), tags={keys.TAG_RECIPE: json.dumps(recipe)}
    )
    result = CliRunner().invoke(
        main, ["audit", "--model", "models:/planted/1", "--query", "M1", "--model-url", "http://127.0.0.1:9/x"]
    )
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if "INFO mlflow" not in line and line.strip()]
    assert len(errors) == 1 and errors[0].startswith("Error: expected 'estimator' to name a scikit-learn"), errors
    assert not canary.exists()
