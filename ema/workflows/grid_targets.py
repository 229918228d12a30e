"""The grids' targets: ONE target per (recipe, data), trained once and cached in the registry.

A target is registered as :data:`GRID_TARGET_NAME` with tag ``ema.cache_key`` (the recipe, the
data source and seed, and the training split's fingerprint, hashed); grids started at once with
the same recipe and data train it once (single flight), the others wait and reuse it.
"""

from __future__ import annotations

from pathlib import Path

from ema.data.presets import load_splits
from ema.tracking import keys
from ema.tracking.helper_cache import TrustedEntry, find_entry, record_entry
from ema.tracking.registry import set_version_tags
from ema.tracking.single_flight import single_flight
from ema.training.helper_loading import load_helper
from ema.training.recipes import TorchRecipe
from ema.training.spec import TrainSpec
from ema.validation import short_hash
from ema.workflows.train import train_target

#: Registered name of the targets the grids train.
GRID_TARGET_NAME = "ema-grid-target"


def ensure_target(
    recipe: TrainSpec, *, data: str, data_seed: int, data_root: str | None, progress: bool
) -> tuple[TrustedEntry, bool]:
    """The grid target for (recipe, data): the cached entry, or a newly trained one; and whether it was cached.

    Grids started at once with the same recipe and data train it once; the others wait and reuse it.
    A cached entry is used only when its weights load into the recipe's network: the grid scores
    them rebuilt so (:attr:`ema.workflows.target.Target.own_files`), never the files' own code.
    """
    splits = load_splits(data, data_seed, data_root)
    cache_key = short_hash(
        {
            "recipe": TorchRecipe(recipe).to_dict(),
            "data": data,
            "data_seed": data_seed,
            "data_root": str(Path(data_root).resolve()) if data_root else "",
            "train": splits.train.fingerprint,
        }
    )

    def build() -> TrustedEntry:
        trained = train_target(
            recipe, data=data, data_seed=data_seed, data_root=data_root, model_name=GRID_TARGET_NAME, progress=progress
        )
        set_version_tags(trained.version, {keys.TAG_CACHE_KEY: cache_key})
        return record_entry(trained.version, cache_key)

    def find() -> TrustedEntry | None:
        return find_entry(GRID_TARGET_NAME, cache_key, read=lambda entry: load_helper(TorchRecipe(recipe), entry.path))

    entry, built = single_flight(GRID_TARGET_NAME, cache_key, find=find, build=build)
    return entry, not built
