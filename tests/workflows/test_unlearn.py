"""`ema unlearn`: new versions with their lineage, member references without the forget set, refused input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.data.files import read_set, write_set
from ema.errors import EMAError
from ema.tracking import keys
from ema.tracking.registry import log_and_register
from ema.tracking.runs import download_artifact, start_run
from ema.training.packaging import load_torch_model, package_torch_model
from ema.training.unlearn_spec import UnlearnSpec
from ema.workflows.audit import AuditConfig, audit
from ema.workflows.references import contains_all, member_reference, without_query
from ema.workflows.target import resolve_target
from ema.workflows.unlearn import UnlearnConfig, unlearn, unlearn_cached
from ema_cli.cli import main


def _unlearn(uri: str, forget: str = "M1", method: str = "retrain", **options):
    spec = UnlearnSpec(method=method, epochs=options.pop("epochs", 2), seed=options.pop("seed", 0))
    return unlearn(UnlearnConfig(model_uri=uri, forget=forget, spec=spec, **options), progress=False)


def _versions(name: str) -> list[str]:
    return sorted(str(v.version) for v in MlflowClient().search_model_versions(f"name = '{name}'"))


def _failed_runs() -> list:
    client = MlflowClient()
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments, filter_string="attributes.status = 'FAILED'")


@pytest.fixture(scope="module")
def retrained(trained):
    """The module's target retrained without M1 (2 epochs), as a registered version."""
    _, outcome = trained
    return _unlearn(outcome.version.uri)


def test_unlearn_registers_a_new_version_of_the_same_model_with_its_lineage(trained, retrained, tmp_path):
    _, outcome = trained
    version, splits = retrained.version, resolve_target(outcome.version.uri).splits()
    m1 = splits.query("M1")
    assert version.name == outcome.version.name and version.version != outcome.version.version
    assert str(MlflowClient().get_model_version_by_alias(version.name, keys.UNLEARNED_ALIAS).version) == version.version
    tags = version.tags
    assert tags[keys.TAG_ROLE] == keys.ROLE_UNLEARNED
    assert tags[keys.TAG_UNLEARNED_FROM] == outcome.version.version
    assert tags[keys.TAG_UNLEARN_METHOD] == "retrain"
    assert tags[keys.TAG_FORGET] == "M1" and tags[keys.TAG_FORGET_FINGERPRINT] == m1.fingerprint
    assert tags[keys.TAG_DATA_FINGERPRINT] == without_query(splits.train, m1).fingerprint
    assert tags[keys.TAG_RECIPE] == outcome.version.tags[keys.TAG_RECIPE]
    assert UnlearnSpec(**json.loads(tags[keys.TAG_UNLEARN_SPEC])) == retrained.spec
    assert set(retrained.metrics) == {"retain_accuracy", "forget_accuracy", "test_accuracy", "unlearn_seconds"}
    assert float(tags["ema.unlearn.forget_accuracy"]) == pytest.approx(retrained.metrics["forget_accuracy"], 1e-5)
    run = MlflowClient().get_run(retrained.run_id)
    contexts = {
        next(t.value for t in i.tags if t.key == keys.TAG_DATASET_CONTEXT): i.dataset.digest
        for i in run.inputs.dataset_inputs
    }
    assert contexts["forget"] == m1.fingerprint
    logged = read_set(download_artifact(retrained.run_id, keys.ARTIFACT_FORGET, tmp_path))
    np.testing.assert_array_equal(logged.x, m1.x)


def test_retrain_uses_the_recipe_with_the_given_seed_and_epochs(trained, retrained):
    _, outcome = trained
    recipe_epochs = resolve_target(outcome.version.uri).recipe.spec.epochs
    assert retrained.spec.epochs == 2 != recipe_epochs
    assert retrained.spec.lr == resolve_target(outcome.version.uri).recipe.spec.lr
    again = _unlearn(outcome.version.uri, alias=None)
    first, second = load_torch_model(retrained.version.uri), load_torch_model(again.version.uri)
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert np.array_equal(a.numpy(), b.numpy())


def test_the_audit_of_the_forget_set_on_an_unlearned_version_uses_members_without_it(trained, retrained):
    _, outcome = trained
    unlearned = resolve_target(retrained.version.uri)
    splits = unlearned.splits()
    m1, m2 = splits.query("M1"), splits.query("M2")
    reference = member_reference(unlearned, m1)
    assert len(reference.data) == len(splits.train) - len(m1)
    assert not contains_all(reference.data, m1).any()
    assert "minus the forget set M1" in reference.description
    for_m2 = member_reference(unlearned, m2)
    assert len(for_m2.data) == len(splits.train) - 2 * len(m1)
    assert not contains_all(for_m2.data, m1).any() and not contains_all(for_m2.data, m2).any()
    original = member_reference(resolve_target(outcome.version.uri), m2)
    assert contains_all(original.data, m1).all()  # the target's own reference still holds M1

    result = audit(AuditConfig(model_uri=retrained.version.uri, query="M1", method="calibrated"), progress=False)
    tags = MlflowClient().get_run(result.run_id).data.tags
    assert "minus the forget set M1" in tags[keys.TAG_MEMBER_REFERENCE]
    assert f"{len(splits.train) - len(m1)} samples" in tags[keys.TAG_MEMBER_REFERENCE]
    assert result.expected_verdict == tags[keys.TAG_EXPECTED_VERDICT] == "not_memorized"


def test_approximate_methods_chain_and_each_removes_its_own_set(trained, retrained):
    again = _unlearn(retrained.version.uri, forget="M2", method="finetune", epochs=1, alias="chained")
    assert again.version.tags[keys.TAG_UNLEARNED_FROM] == retrained.version.version
    chained = resolve_target(again.version.uri)
    splits = chained.splits()
    members = member_reference(chained, splits.query("M6")).data
    assert len(members) == len(splits.train) - 2 * len(splits.query("M1"))
    assert not contains_all(members, splits.query("M1")).any() and not contains_all(members, splits.query("M2")).any()
    with pytest.raises(EMAError, match="1000 of 1000 samples not in it"):
        _unlearn(again.version.uri, forget="M1", method="finetune", epochs=1)


@pytest.mark.parametrize(
    ("forget", "message"),
    [("M6", "expected a forget set within the training data"), ("empty", "expected at least one sample")],
)
def test_bad_forget_sets_fail_the_run_and_register_nothing(trained, tmp_path, forget, message):
    _, outcome = trained
    if forget == "empty":
        m1 = resolve_target(outcome.version.uri).splits().query("M1")
        forget = str(write_set(m1.take(np.arange(0)), tmp_path / "empty.npz"))
    before, failed = _versions(outcome.version.name), len(_failed_runs())
    with pytest.raises(EMAError, match=message):
        _unlearn(outcome.version.uri, forget=forget)
    assert _versions(outcome.version.name) == before
    assert len(_failed_runs()) == failed + 1


def test_a_model_without_recorded_training_data_needs_retain(trained, tmp_path):
    _, outcome = trained
    splits = resolve_target(outcome.version.uri).splits()
    with start_run("register a copy without lineage"):
        model = load_torch_model(outcome.version.uri)
        with package_torch_model(model, splits.query("M1").model_inputs()[:2]) as package:
            bare = log_and_register(
                package, name="no-lineage", alias="bare", tags={keys.TAG_RECIPE: outcome.version.tags[keys.TAG_RECIPE]}
            )
    result = CliRunner().invoke(main, ["unlearn", "--model", bare.uri, "--forget", "M1", "--method", "finetune"])
    assert result.exit_code != 0
    assert result.output.strip().splitlines() == [
        "Error: no-lineage v1 has no recorded training data (no `ema train` lineage, no logged training .npz): "
        "pass --retain FILE (.npz, .csv or .parquet) with the data to keep"
    ]
    assert _versions("no-lineage") == ["1"]
    retain = write_set(without_query(splits.train, splits.query("M1")), tmp_path / "retain.npz")
    done = _unlearn(bare.uri, method="finetune", epochs=1, retain_file=str(retain))
    members = member_reference(resolve_target(done.version.uri), splits.query("M6"))
    assert members.data.fingerprint == read_set(retain).fingerprint  # the logged --retain file is the reference
    overlapping = write_set(splits.train, tmp_path / "everything.npz")
    with pytest.raises(EMAError, match="expected --retain without the forget set"):
        _unlearn(bare.uri, method="finetune", epochs=1, retain_file=str(overlapping))


def test_cli_unlearn_prints_the_new_version(trained):
    _, outcome = trained
    result = CliRunner().invoke(
        main,
        [
            "unlearn",
            "--model",
            outcome.version.uri,
            "--forget",
            "M3",
            "--method",
            "random-labels",
            "--epochs",
            "1",
            "--no-progress",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("registered "))
    assert line.startswith(f"registered models:/{outcome.version.name}/")
    assert f"random-labels of M3 from {outcome.version.uri}: accuracy retained" in line


def test_unlearn_cached_reuses_a_version_made_with_the_same_key_and_no_other(trained):
    _, outcome = trained

    def cached(**spec):
        config = UnlearnConfig(
            model_uri=outcome.version.uri, forget="M4", spec=UnlearnSpec(method="finetune", **spec), alias=None
        )
        return unlearn_cached(config, progress=False)

    first, first_reused = cached(epochs=1, seed=0)
    again, again_reused = cached(epochs=1, seed=0)
    assert (first_reused, again_reused) == (False, True)
    assert again.version.uri == first.version.uri and again.run_id == first.run_id
    assert again.metrics == first.metrics and again.spec == first.spec
    assert again.source.uri == outcome.version.uri
    made = {first.version.version}
    for changed in ({"epochs": 1, "seed": 1}, {"epochs": 2, "seed": 0}, {"epochs": 1, "seed": 0, "lr": 0.02}):
        other, reused = cached(**changed)
        assert not reused and other.version.version not in made, changed
        made.add(other.version.version)
    with pytest.raises(EMAError, match="expected no alias for a cached unlearned version"):
        unlearn_cached(UnlearnConfig(model_uri=outcome.version.uri, forget="M4", spec=UnlearnSpec(method="finetune")))


def test_unlearn_cached_reuses_the_version_ema_unlearn_made_with_the_same_method_and_seed(trained):
    _, outcome = trained
    made = CliRunner().invoke(
        main,
        ["unlearn", "--model", outcome.version.uri, "--forget", "M5", "--method", "finetune", "--no-progress"],
        catch_exceptions=False,
    )
    assert made.exit_code == 0, made.output
    before = _versions(outcome.version.name)
    config = UnlearnConfig(model_uri=outcome.version.uri, forget="M5", spec=UnlearnSpec(method="finetune"), alias=None)
    again, reused = unlearn_cached(config, progress=False)
    assert reused and _versions(outcome.version.name) == before  # the grid's way in registers nothing new
    assert f"registered {again.version.uri} (alias unlearned)" in made.output
