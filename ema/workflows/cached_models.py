"""Models the auditor trains for itself with the target's recipe, cached in the registry, read back as data.

A cached model is used only if the auditor's own run recorded it with the files it has now
(:mod:`ema.tracking.helper_cache`), and it is rebuilt from its weights into the recipe's
architecture (:mod:`ema.training.helper_loading`): nothing the registry holds runs here.
"""

from __future__ import annotations

from ema.data.arrays import ArraySet
from ema.oracle import LocalOracle, Oracle
from ema.tracking import keys
from ema.tracking.helper_cache import TrustedEntry, find_entry, record_entry
from ema.tracking.registry import log_and_register
from ema.tracking.runs import start_run, tracking_uri
from ema.tracking.single_flight import single_flight
from ema.training.clones import package_trained
from ema.training.helper_loading import load_helper
from ema.training.recipes import recipe_to_json
from ema.validation import short_hash
from ema.workflows.target import Target

#: Registered names of the KS-ratio baseline's extra models, by role.
ROLE_MODEL_NAMES = {"query-model": "ema-query-model", "calset-model": "ema-calset-model"}


def model_cache_key(target: Target, role: str, data: ArraySet, n_classes: int) -> str:
    return short_hash(
        {"recipe": target.require_recipe().to_dict(), "role": role, "data": data.fingerprint, "classes": n_classes}
    )


def cached_model(
    target: Target, role: str, data: ArraySet, *, n_classes: int, progress: bool = True
) -> tuple[Oracle, bool]:
    """A model trained on ``data`` with the target's recipe, as an oracle; trained only on a cache miss.

    ``n_classes``: the target's outputs, which a torch network trained here gets too, whatever
    classes ``data`` holds (a small query set may lack some); the KS ratio compares their outputs.

    Processes that miss the same model at once train it once, the others wait and reuse it.
    The version is registered without an alias: these models are found by their cache key,
    and an audit moves no alias.

    Returns the oracle (showing its scoring's progress with ``progress``, as training shows its) and whether the
    registry already held the model.
    """
    name = ROLE_MODEL_NAMES[role]
    cache_key = model_cache_key(target, role, data, n_classes)

    def build() -> TrustedEntry:
        with start_run(f"train {role} {data.name} for {target.label}"):
            classifier = target.require_recipe().fit(
                data.model_inputs(), data.y, progress=progress, device=target.device, n_classes=n_classes
            )
            with package_trained(classifier, data.x) as package:
                version = log_and_register(
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
            return record_entry(version, cache_key)

    entry, built = single_flight(name, cache_key, find=lambda: usable_entry(name, cache_key, target), build=build)
    return helper_oracle(entry, target).with_progress(progress), not built


def usable_entry(name: str, cache_key: str, target: Target) -> TrustedEntry | None:
    """The auditor's own entry under ``cache_key`` whose files the target's recipe reads back, or None."""
    return find_entry(name, cache_key, read=lambda entry: helper_oracle(entry, target))


def helper_oracle(entry: TrustedEntry, target: Target) -> Oracle:
    """One of the auditor's own models as an oracle, on the target's device, rebuilt from its weights once per
    process, store and device.

    A checked entry's files never change (their digest is part of the key, and the cache key
    they were found under holds the recipe), so a grid that audits many cells against the
    same calibration or KS-ratio models loads each of them once.

    Raises
    ------
    HelperLoadError
        If the files do not hold what the target's recipe builds.
    """
    key = (tracking_uri(), entry.version.uri, entry.version.run_id, entry.digest, target.device)
    if key not in _LOADED:
        if len(_LOADED) >= MAX_LOADED:
            _LOADED.pop(next(iter(_LOADED)))
        classifier = load_helper(target.require_recipe(), entry.path, device=target.device)
        _LOADED[key] = LocalOracle(classifier, source=f"helper model {entry.version.uri!r}")
    return _LOADED[key]


#: Helper oracles loaded in this process, oldest first, at most :data:`MAX_LOADED`.
MAX_LOADED = 16
_LOADED: dict[tuple[str, str, str | None, str, str], Oracle] = {}
