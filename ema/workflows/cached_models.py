"""Models the auditor trains for itself with the target's recipe, cached in the registry."""

from __future__ import annotations

import functools

from ema.data.arrays import ArraySet
from ema.inputs import InputTransform
from ema.oracle import Oracle, PyfuncOracle
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, find_cached_version, log_and_register
from ema.tracking.runs import start_run, tracking_uri
from ema.tracking.single_flight import single_flight
from ema.training.clones import package_trained
from ema.training.recipes import recipe_to_json
from ema.validation import short_hash
from ema.workflows.target import Target

#: Registered names of the KS-ratio baseline's extra models, by role.
ROLE_MODEL_NAMES = {"query-model": "ema-query-model", "calset-model": "ema-calset-model"}


def model_cache_key(target: Target, role: str, data: ArraySet) -> str:
    return short_hash({"recipe": target.require_recipe().to_dict(), "role": role, "data": data.fingerprint})


def cached_model(target: Target, role: str, data: ArraySet, *, progress: bool = True) -> tuple[Oracle, bool]:
    """A model trained on ``data`` with the target's recipe, as an oracle; trained only on a cache miss.

    Processes that miss the same model at once train it once, the others wait and reuse it.
    The version is registered without an alias: these models are found by their cache key,
    and an audit moves no alias.

    Returns the oracle and whether the registry already held the model.
    """
    name = ROLE_MODEL_NAMES[role]
    cache_key = model_cache_key(target, role, data)

    def build() -> RegisteredVersion:
        with start_run(f"train {role} {data.name} for {target.label}"):
            classifier = target.require_recipe().fit(data.pixels(), data.y, progress=progress)
            with package_trained(classifier, data.x) as package:
                return log_and_register(
                    package,
                    name=name,
                    alias=None,
                    tags={
                        keys.TAG_ROLE: role,
                        keys.TAG_CACHE_KEY: cache_key,
                        keys.TAG_RECIPE: recipe_to_json(target.require_recipe()),
                        keys.TAG_DATA_FINGERPRINT: data.fingerprint,
                    },
                )

    version, built = single_flight(name, cache_key, find=lambda: find_cached_version(name, cache_key), build=build)
    return registered_oracle(version, target.transform), not built


def registered_oracle(version: RegisteredVersion, transform: InputTransform) -> Oracle:
    """A registered version of one of our models as an oracle, loaded once per process and store.

    A version's files never change, so a grid that audits many cells against the same
    calibration or KS-ratio models loads each of them once. The cache key includes the
    version's run: a model deleted and registered again restarts at version 1.
    """
    if version.run_id is None:
        return PyfuncOracle(version.uri, outputs="probabilities", transform=transform)
    return _pinned_oracle(tracking_uri(), version.uri, version.run_id, transform)


@functools.lru_cache(maxsize=16)
def _pinned_oracle(tracking_uri: str, model_uri: str, run_id: str, transform: InputTransform) -> Oracle:
    return PyfuncOracle(model_uri, outputs="probabilities", transform=transform)
