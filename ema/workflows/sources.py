"""Which data a run draws its splits from, and the recipe a registered target records."""

from __future__ import annotations

from ema.data.arrays import ArraySet
from ema.data.files import read_set
from ema.data.splits import Splits, make_splits
from ema.errors import EMAError, InputError
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion
from ema.training.spec import TrainSpec

DATA_SOURCES = ("mnist-embedded",)
DEFAULT_DATA = "mnist-embedded"


def load_splits(data: str = DEFAULT_DATA, seed: int = 0) -> Splits:
    """The splits of a data source under a split seed."""
    if data not in DATA_SOURCES:
        raise InputError(f"expected a data source from {list(DATA_SOURCES)}, got {data!r}")
    return make_splits(seed)


def target_splits(target: RegisteredVersion) -> Splits:
    """The splits the target was trained from, as its version tags record them."""
    return load_splits(target.tags.get(keys.TAG_DATA_SOURCE, DEFAULT_DATA), int(target.tags.get(keys.TAG_DATA_SEED, 0)))


def target_recipe(target: RegisteredVersion) -> TrainSpec:
    """The training recipe recorded on a target version by ``ema train``."""
    recipe = target.tags.get(keys.TAG_TRAIN_SPEC)
    if recipe is None:
        raise EMAError(
            f"model {target.uri} has no training recipe (tag {keys.TAG_TRAIN_SPEC!r}); "
            "expected a version registered by `ema train`"
        )
    return TrainSpec.from_json(recipe)


def query_set(target: RegisteredVersion, *, query: str | None, query_file: str | None) -> ArraySet:
    """A named query set of the target's splits, or a query file; exactly one must be given."""
    if (query is None) == (query_file is None):
        raise InputError(f"expected exactly one of a query name or a query file, got query={query!r}, query_file={query_file!r}")
    if query_file is not None:
        return read_set(query_file)
    return target_splits(target).query(query)
