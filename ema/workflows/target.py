"""The model under audit: how it is reached (pyfunc URI or HTTP URL), its recipe and its data."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ema.data.arrays import ArraySet
from ema.data.files import read_set
from ema.data.parquet import read_table
from ema.data.presets import DEFAULT_DATA, load_splits
from ema.data.splits import Splits
from ema.errors import EMAError, InputError
from ema.inputs import InputTransform
from ema.oracle import HttpOracle, Oracle, PyfuncOracle
from ema.tracking import keys
from ema.tracking.registry import MODELS_URI, RegisteredVersion, declared_input_shape, resolve_version
from ema.training.recipes import Recipe, load_recipe, recipe_from_json


@dataclass(frozen=True)
class Target:
    """A model to audit.

    Attributes
    ----------
    model_uri : str or None
        The pyfunc URI, pinned to a version when it names a registered model.
    model_url : str or None
        A scoring server's ``/invocations`` URL; when given, predictions come from it.
    version : RegisteredVersion or None
        The registry entry, when the model is registered (for its tags and audit history).
    recipe : Recipe
        The training algorithm A, from the version's tags or a recipe file.
    data, data_seed, data_root
        Where the named query sets and the calibration set come from.
    """

    model_uri: str | None
    model_url: str | None
    version: RegisteredVersion | None
    recipe: Recipe
    data: str = DEFAULT_DATA
    data_seed: int = 0
    data_root: str | None = None

    @property
    def label(self) -> str:
        if self.version is not None:
            return f"{self.version.name} v{self.version.version}"
        return self.model_uri or self.model_url or "model"

    def splits(self) -> Splits:
        return load_splits(self.data, self.data_seed, self.data_root)

    def query_set(self, *, query: str | None, query_file: str | None, query_table: str | None = None) -> ArraySet:
        """A named query set of the target's splits, a query file, or a local query table; exactly one."""
        given = {"query": query, "query_file": query_file, "query_table": query_table}
        if sum(v is not None for v in given.values()) != 1:
            raise InputError(f"expected exactly one of a query name, a query file or a query table, got {given}")
        if query_table is not None:
            return read_table(query_table)
        return read_set(query_file) if query_file is not None else self.splits().query(query)

    def oracle(
        self,
        *,
        outputs: str = "auto",
        batch_size: int | None = None,
        timeout: float | None = None,
        request_timeout: float | None = None,
    ) -> Oracle:
        """Black-box access: HTTP when a URL is given, else the pyfunc loaded in-process.

        ``timeout`` and ``request_timeout`` (seconds; None keeps HttpOracle's defaults) bound scoring over HTTP.
        """
        options = {"outputs": outputs, "transform": self.recipe.transform}
        if batch_size:
            options["batch_size"] = batch_size
        if self.model_url is not None:
            if self.model_uri is not None:
                shape = declared_input_shape(self.model_uri)
                if shape is not None:
                    options["input_shape"] = shape
            limits = {"timeout": timeout, "request_timeout": request_timeout}
            return HttpOracle(self.model_url, **options, **{k: v for k, v in limits.items() if v is not None})
        return PyfuncOracle(self.model_uri, **options)


def resolve_target(
    model_uri: str | None = None,
    *,
    model_url: str | None = None,
    recipe_file: str | None = None,
    data: str | None = None,
    data_seed: int | None = None,
    data_root: str | None = None,
    transform: InputTransform | None = None,
) -> Target:
    """Find the model's registry entry and recipe.

    A registered version (``models:/...``) carries its recipe and data on its tags, as
    ``ema train`` records them; any other model needs ``recipe_file``. ``transform``
    overrides the recipe's input representation.
    """
    if model_uri is None and model_url is None:
        raise InputError("expected a model: a pyfunc URI (--model) or a scoring server URL (--model-url), got neither")
    version = resolve_version(model_uri) if model_uri and MODELS_URI.match(model_uri) else None
    tags = version.tags if version else {}
    if recipe_file is not None:
        recipe = load_recipe(recipe_file)
    elif keys.TAG_RECIPE in tags:
        recipe = recipe_from_json(tags[keys.TAG_RECIPE])
    else:
        where = (
            f"model {version.uri} has no tag {keys.TAG_RECIPE!r}"
            if version
            else f"{model_uri or model_url} is not a registered model"
        )
        raise EMAError(f"expected a training recipe to train the calibration model; {where}: pass --recipe FILE")
    if transform is not None:
        recipe = dataclasses.replace(recipe, transform=transform)
    return Target(
        model_uri=version.uri if version else model_uri,
        model_url=model_url,
        version=version,
        recipe=recipe,
        data=data or tags.get(keys.TAG_DATA_SOURCE, DEFAULT_DATA),
        data_seed=int(data_seed if data_seed is not None else tags.get(keys.TAG_DATA_SEED, 0)),
        data_root=data_root or tags.get(keys.TAG_DATA_ROOT),
    )


def transform_from_options(input_scale: float | None, normalize: str | None) -> InputTransform | None:
    """An input transform from ``--input-scale`` and ``--normalize MEAN,STD``; None when neither is given."""
    if input_scale is None and normalize is None:
        return None
    mean, std = 0.0, 1.0
    if normalize is not None:
        try:
            mean, std = (float(v) for v in normalize.split(","))
        except ValueError as exc:
            raise InputError(f"expected --normalize MEAN,STD as two numbers, got {normalize!r}") from exc
    return InputTransform(scale=input_scale if input_scale is not None else 1.0, mean=mean, std=std)
