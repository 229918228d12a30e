"""The model under audit: how it is reached (pyfunc URI or HTTP URL), how its calibration model is made, its data."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ema.data.arrays import ArraySet
from ema.data.files import read_set
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.parquet import read_table
from ema.data.presets import DEFAULT_DATA, load_splits
from ema.data.sources import ImageFormat
from ema.data.sources.images import resize_set
from ema.data.splits import Splits
from ema.data.tables import ALLOW_MISSING_OPTION, DEFAULT_LABEL_COLUMN
from ema.errors import InputError
from ema.image_shapes import DEFAULT_PIXEL_ORDER, parse_input_shape
from ema.input_transform import InputTransform, parse_normalize
from ema.inputs import InputSpec
from ema.oracle import HttpOracle, LocalOracle, Oracle, PyfuncOracle
from ema.oracle.model_info import declared_input_spec, load_native_model, model_flavors
from ema.oracle.scoring_server import AUTO_FORMAT
from ema.tracking import keys
from ema.tracking.registry import MODELS_URI, RegisteredVersion, resolve_version
from ema.training.clones import CloneRecipe, SklearnCloneRecipe, TorchCloneRecipe
from ema.training.devices import CPU
from ema.training.helper_loading import load_helper
from ema.training.recipes import Recipe, TorchRecipe, load_recipe, recipe_from_json
from ema.training.spec import ARCHITECTURES, TrainSpec
from ema.validation import redact_url

#: Values of the tag ``ema.calibration_source``: how the calibration model came to be.
SOURCE_CLONE, SOURCE_RECIPE, SOURCE_SUPPLIED = "clone", "recipe", "supplied"


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
    recipe : Recipe, CloneRecipe or None
        How the calibration model is trained: a recipe (the version's tag or a file), or a
        clone of the target's own architecture; None when neither is known (a calibration
        model must then be supplied).
    transform : InputTransform
        How pixels in [0, 1] are scaled for the target (and its calibration model).
    input_shape : tuple of int or None
        ``--input-shape``: overrides the shape the target's signature declares.
    input_dtype : str or None
        ``--input-dtype``: overrides the type it declares (an HTTP endpoint with no registry
        entry declares none; our own models take uint8).
    pixel_order : {"chw", "hwc"}
        ``--pixel-order``: how colour images flattened to fit the target's inputs are ordered,
        for the target, a clone of it and a supplied calibration model (:mod:`ema.image_shapes`).
    calibration_source : {"clone", "recipe"} or None
        Where ``recipe`` came from, for the run's tag ``ema.calibration_source``.
    data, data_seed, data_root, label_column
        Where the named query sets and the calibration set come from (a table file's labels in
        ``label_column``).
    data_folds : tuple of (str, str)
        Training folds the target was trained on an owner's file in place of (``ema train --fold``):
        (fold, path) pairs, applied to the splits.
    calibration_data : ArraySet or None
        ``--calibration-file``: the auditor's own data from the target's domain, replacing the
        splits' calibration set (f_cal's halves, and the default non-member reference).
    allow_missing : bool
        ``--allow-missing``: the tables given for the audit (query, references, calibration) keep
        their missing numbers as NaN, sent so to the model, instead of being refused. The target's
        own training data (its lineage) is read without it: the workbench's recipes fill nothing in.
    device : str
        Where torch trains the calibration and helper models and scores a model loaded in this
        process: a resolved device, ``cpu`` or ``cuda:N`` (:func:`ema.training.devices.resolve_device`).
    own_files : Path or None
        The checked files of a model the auditor made itself (a grid target, a cached unlearned
        version: :class:`~ema.tracking.helper_cache.TrustedEntry`): it is then scored as its
        weights rebuilt with ``recipe`` (:func:`~ema.training.helper_loading.load_helper`), so that
        nothing a store writer could have put beside them runs.
    """

    model_uri: str | None
    model_url: str | None
    version: RegisteredVersion | None
    recipe: Recipe | CloneRecipe | None
    transform: InputTransform = InputTransform()
    input_shape: tuple[int, ...] | None = None
    input_dtype: str | None = None
    pixel_order: str = DEFAULT_PIXEL_ORDER
    calibration_source: str | None = None
    data: str = DEFAULT_DATA
    data_seed: int = 0
    data_root: str | None = None
    data_image: ImageFormat = ImageFormat()
    image_size: int | None = None
    label_column: str = DEFAULT_LABEL_COLUMN
    data_folds: tuple[tuple[str, str], ...] = ()
    calibration_data: ArraySet | None = None
    allow_missing: bool = False
    device: str = CPU
    own_files: Path | None = None

    def read_set(
        self, path: str, *, role: str, max_images: int = DEFAULT_MAX_QUERY, label_column: str = DEFAULT_LABEL_COLUMN
    ) -> ArraySet:
        """A set file given for this audit (query, reference, members), its images resized to ``image_size`` if set,
        a table's missing numbers kept as NaN with ``allow_missing``; ``role`` names it where it is missing
        (:func:`~ema.data.files.read_set`)."""
        return self.prepared(
            read_set(path, role=role, max_images=max_images, label_column=label_column, **self.missing_options)
        )

    @property
    def missing_options(self) -> dict[str, object]:
        """How the audit's tables are read for missing numbers: kept as NaN with ``allow_missing``, else refused
        naming ``--allow-missing`` as what lets them through."""
        return {"allow_missing": self.allow_missing, "option": ALLOW_MISSING_OPTION}

    def prepared(self, data: ArraySet) -> ArraySet:
        """``data`` with its images resized to ``image_size`` (``--image-size``); as it is without one.

        Raises
        ------
        InputError
            If ``data`` is a table and the audit scales or normalises its inputs (``--input-scale``,
            ``--normalize``, which act on pixels) or resizes them.
        """
        if data.kind == "table":
            self.refuse_pixel_options(data.name, data.describe())
        return data if self.image_size is None else resize_set(data, self.image_size)

    def refuse_pixel_options(self, name: str, description: str) -> None:
        """Refuse ``--input-scale``, ``--normalize``, ``--pixel-order`` and ``--image-size`` for the table ``name``
        (they act on pixels).

        Raises
        ------
        InputError
            Naming the table (``description``: ``table of 30 features``) and the options given.
        """
        if not self.transform.is_identity:
            raise InputError(
                f"{name}: expected no --input-scale or --normalize with a {description} (they scale pixels), "
                f"got {' '.join(self.transform.acting_options())}; give the features as the model was trained on them"
            )
        if self.pixel_order != DEFAULT_PIXEL_ORDER:
            raise InputError(
                f"{name}: expected images to order with --pixel-order {self.pixel_order}, got a {description} (its "
                "features go in its columns' order); leave out --pixel-order"
            )
        if self.image_size is not None:
            raise InputError(f"{name}: expected images to resize with --image-size, got a {description}")

    def require_recipe(
        self, purpose: str = "train the calibration model", fix: str = "pass --recipe FILE (or --calibration-model URI)"
    ) -> Recipe | CloneRecipe:
        """The recipe, or a one-line error saying what it was needed for (``purpose``) and what to do (``fix``)."""
        if self.recipe is not None:
            return self.recipe
        if self.model_url is not None:
            where = f"{redact_url(self.model_url)} is reached over HTTP, where its architecture cannot be cloned"
        elif self.version is not None:
            where = f"model {self.version.uri} has no tag {keys.TAG_RECIPE!r} and is not a sklearn or pytorch model"
        else:
            where = f"{self.model_uri} is not a registered model and not a sklearn or pytorch model"
        raise InputError(f"expected a training recipe to {purpose}; {where}: {fix}")

    @property
    def label(self) -> str:
        """How runs and messages name the model: its registered version, else its URI or URL without secrets."""
        if self.version is not None:
            return f"{self.version.name} v{self.version.version}"
        return redact_url(self.model_uri or self.model_url or "model")

    def splits(self) -> Splits:
        """The splits of the target's data, with the folds it was trained on an owner's file in place of."""
        splits = load_splits(self.data, self.data_seed, self.data_root, self.data_image, label_column=self.label_column)
        for name, path in self.data_folds:
            role = f"training file of fold {name} (recorded by {self.label}'s lineage)"
            splits = splits.with_fold(name, read_set(path, role=role, label_column=self.label_column))
        return splits

    def calibration_set(self) -> ArraySet:
        """The clean calibration set: ``--calibration-file`` when given, else the splits' calibration set."""
        return self.calibration_data if self.calibration_data is not None else self.prepared(self.splits().calibration)

    def describe_calibration(self) -> str:
        """Where the calibration set comes from, in words, for tags."""
        if self.calibration_data is not None:
            return f"calibration file {self.calibration_data.name}"
        return f"clean calibration set of {self.data}"

    def query_set(
        self,
        *,
        query: str | None,
        query_file: str | None,
        query_table: str | None = None,
        max_images: int = DEFAULT_MAX_QUERY,
        label_column: str = DEFAULT_LABEL_COLUMN,
    ) -> ArraySet:
        """A named query set of the target's splits, a query file, or a local query table; exactly one.

        A file or table is read only when it holds at most ``max_images`` images; a table
        file's labels are in ``label_column``, its missing numbers kept as NaN with ``allow_missing``.
        """
        given = {"query": query, "query_file": query_file, "query_table": query_table}
        if sum(v is not None for v in given.values()) != 1:
            raise InputError(f"expected exactly one of a query name, a query file or a query table, got {given}")
        if query_table is not None:
            return self.prepared(
                read_table(query_table, max_images=max_images, label_column=label_column, **self.missing_options)
            )
        if query_file is not None:
            return self.read_set(query_file, role="query file", max_images=max_images, label_column=label_column)
        return self.prepared(self.splits().query(query))

    def oracle(
        self,
        *,
        outputs: str = "auto",
        output_name: str | None = None,
        batch_size: int | None = None,
        timeout: float | None = None,
        request_timeout: float | None = None,
        http_concurrency: int = 1,
        http_format: str = "auto",
    ) -> Oracle:
        """Black-box access: HTTP when a URL is given, the auditor's own weights, else the pyfunc loaded in-process.

        Inputs follow the model's signature (over HTTP, the registered model's, when ``--model``
        names one), with ``input_shape`` and ``input_dtype`` overriding its shape and type, in
        ``pixel_order`` where images are flattened.
        ``timeout`` and ``request_timeout`` (seconds; None keeps HttpOracle's defaults) bound
        scoring over HTTP; ``http_concurrency`` requests are in flight at once. ``http_format``
        ``auto`` sends Parquet when the registered model's signature declares its inputs (a
        tensor of fixed shape, or columns: the server then shapes them), JSON otherwise.
        """
        sizes = {"batch_size": batch_size} if batch_size else {}
        if self.own_files is not None:  # the recipe's classifier applies its own input transform
            classifier = load_helper(self.require_recipe(), self.own_files, device=self.device)
            return LocalOracle(classifier, source=f"the auditor's own model {self.model_uri!r}", **sizes)
        options = {"outputs": outputs, "transform": self.transform, "output_name": output_name, **sizes}
        if self.model_url is not None:
            declared = declared_input_spec(self.model_uri) if self.model_uri is not None else None
            spec = self.declared(declared)
            if spec is not None:
                options["input_spec"] = spec
            if http_format == AUTO_FORMAT and (declared is None or declared.shape is None):
                http_format = "json"
            limits = {"timeout": timeout, "request_timeout": request_timeout}
            return HttpOracle(
                self.model_url,
                concurrency=http_concurrency,
                request_format=http_format,
                table_names=declared is None and self.input_shape is None and self.input_dtype is None,
                **options,
                **{k: v for k, v in limits.items() if v is not None},
            )
        oracle = PyfuncOracle(self.model_uri, device=self.device, **options)
        oracle.input_spec = self.declared(oracle.input_spec)
        return oracle

    def declared(self, spec: InputSpec | None) -> InputSpec | None:
        """``spec`` (a model's declared inputs) with ``--input-shape``, ``--input-dtype`` and ``--pixel-order``."""
        return with_declared(spec, self.input_shape, self.input_dtype, self.pixel_order)


def with_declared(
    spec: InputSpec | None,
    shape: tuple[int, ...] | None,
    dtype: str | None,
    pixel_order: str = DEFAULT_PIXEL_ORDER,
) -> InputSpec | None:
    """``spec`` with its shape and type replaced by ``--input-shape`` and ``--input-dtype``, in ``pixel_order``.

    A column-based signature keeps its columns (and so its shape): ``--input-shape`` is refused
    for it rather than left unread. None stays None (the oracle's own default) unless a shape or
    type is given: a pixel order alone orders nothing.

    Raises
    ------
    InputError
        If ``shape`` is given for a column-based signature.
    """
    if shape is not None and spec is not None and spec.columns is not None:
        raise InputError(
            f"expected --input-shape only for a model that takes a tensor, got a model whose signature names "
            f"{spec.describe()}: it takes a DataFrame of those columns, whatever the shape; leave out --input-shape"
        )
    changes = {"dtype": dtype} if dtype is not None else {}
    if shape is not None:
        changes.update(shape=shape, channels_last=None)  # the shape given says where the channels go
    if spec is None and not changes:
        return None
    if pixel_order != DEFAULT_PIXEL_ORDER:
        changes["pixel_order"] = pixel_order
    return dataclasses.replace(spec or InputSpec(), **changes)


def resolve_target(
    model_uri: str | None = None,
    *,
    model_url: str | None = None,
    recipe_file: str | None = None,
    data: str | None = None,
    data_seed: int | None = None,
    data_root: str | None = None,
    transform: InputTransform | None = None,
    input_shape: tuple[int, ...] | None = None,
    input_dtype: str | None = None,
    pixel_order: str = DEFAULT_PIXEL_ORDER,
    image_size: int | None = None,
    allow_missing: bool = False,
    device: str = CPU,
    own_files: Path | None = None,
) -> Target:
    """Find the model's registry entry and how to train its calibration model.

    A registered version (``models:/...``) carries its recipe and data on its tags, as
    ``ema train`` records them, and ``recipe_file`` overrides it. Otherwise a target loaded
    in-process with the sklearn or pytorch flavor gets a clone of its own architecture (see
    :func:`own_architecture`); a torch recipe without ``arch`` gives the clone its training
    settings. Over HTTP (``model_url``) nothing is loaded: a recipe stays the route.
    ``transform`` overrides the recipe's input representation; ``pixel_order`` is the target's (and
    so its clone's; a recipe's own architecture takes images as they come). Only ``--model`` is looked up
    in the registry. ``allow_missing`` keeps the missing numbers of the tables read for it, ``device`` is a
    resolved device and ``own_files`` the checked files of a model the auditor made itself (see :class:`Target`).
    """
    if model_uri is None and model_url is None:
        raise InputError("expected a model: a pyfunc URI (--model) or a scoring server URL (--model-url), got neither")
    version = resolve_version(model_uri) if model_uri and MODELS_URI.match(model_uri) else None
    tags = version.tags if version else {}
    uri = version.uri if version else model_uri
    if recipe_file is not None:
        recipe = load_recipe(recipe_file)
        if model_url is not None and not getattr(recipe, "names_architecture", True):
            raise InputError(
                f"expected a recipe that names its architecture ('arch': {', '.join(ARCHITECTURES)}) for a model "
                f"scored over HTTP (--model-url), got {recipe_file} with training settings alone: they clone the "
                "target's own architecture only when the target is loaded in this process; add 'arch', or give "
                "--calibration-model"
            )
    elif keys.TAG_RECIPE in tags:
        recipe = recipe_from_json(tags[keys.TAG_RECIPE])
    else:
        recipe = None
    transform = transform if transform is not None else (recipe.transform if recipe else InputTransform())
    source = SOURCE_RECIPE if recipe is not None else None
    if model_url is None and uri is not None and (recipe is None or not getattr(recipe, "names_architecture", True)):
        clone = own_architecture(uri, recipe, input_shape, input_dtype, pixel_order)
        if clone is not None:
            recipe, source = clone, SOURCE_CLONE
    return Target(
        model_uri=uri,
        model_url=model_url,
        version=version,
        recipe=dataclasses.replace(recipe, transform=transform) if recipe is not None else None,
        transform=transform,
        input_shape=input_shape,
        input_dtype=input_dtype,
        pixel_order=pixel_order,
        calibration_source=source,
        data=data or tags.get(keys.TAG_DATA_SOURCE, DEFAULT_DATA),
        data_seed=int(data_seed if data_seed is not None else tags.get(keys.TAG_DATA_SEED, 0)),
        data_root=data_root or tags.get(keys.TAG_DATA_ROOT),
        data_image=ImageFormat.from_tags(tags, keys.TAG_DATA_IMAGE_SIZE, keys.TAG_DATA_CHANNELS),
        image_size=image_size,
        allow_missing=allow_missing,
        label_column=tags.get(keys.TAG_LABEL_COLUMN, DEFAULT_LABEL_COLUMN),
        data_folds=tuple(
            sorted(
                (tag.removeprefix(keys.TAG_DATA_FOLD_FILE_PREFIX), path)
                for tag, path in tags.items()
                if tag.startswith(keys.TAG_DATA_FOLD_FILE_PREFIX)
            )
        ),
        device=device,
        own_files=own_files,
    )


def own_architecture(
    model_uri: str,
    recipe: TorchRecipe | None,
    input_shape: tuple[int, ...] | None,
    input_dtype: str | None = None,
    pixel_order: str = DEFAULT_PIXEL_ORDER,
) -> CloneRecipe | None:
    """A clone recipe of the target's own architecture, for the sklearn and pytorch flavors; None for others.

    scikit-learn: the loaded estimator or Pipeline, cloned. torch: the loaded module,
    re-initialised and trained with ``recipe``'s settings (the paper's defaults without one)
    on inputs of the target's declared shape and type (or ``input_shape`` and ``input_dtype``). Either is
    trained on images flattened in ``pixel_order``, as the target gets them.
    """
    flavors = model_flavors(model_uri)
    if "sklearn" in flavors and recipe is None:
        template = load_native_model(model_uri, "sklearn")
        fitted = getattr(template, "feature_names_in_", None)  # a model fitted on a frame and logged unsigned
        named = fitted is not None and all(isinstance(name, str) for name in fitted)
        columns = getattr(declared_input_spec(model_uri), "columns", None) or (tuple(fitted) if named else None)
        return SklearnCloneRecipe(template, columns=columns, pixel_order=pixel_order)
    if "pytorch" in flavors:
        spec = recipe.spec if recipe is not None else TrainSpec()
        declared = with_declared(declared_input_spec(model_uri), input_shape, input_dtype, pixel_order) or InputSpec()
        template = load_native_model(model_uri, "pytorch")
        return TorchCloneRecipe(
            template,
            spec,
            declared.shape,
            input_dtype=declared.dtype,
            channels_last=declared.channels_last,
            pixel_order=pixel_order,
        )
    return None


def transform_from_options(input_scale: float | None, normalize: str | None) -> InputTransform | None:
    """An input transform from ``--input-scale`` and ``--normalize`` (:func:`ema.input_transform.parse_normalize`);
    None when neither is given."""
    if input_scale is None and normalize is None:
        return None
    mean, std = parse_normalize(normalize) if normalize is not None else (0.0, 1.0)
    return InputTransform(scale=input_scale if input_scale is not None else 1.0, mean=mean, std=std)


def input_shape_from_option(text: str | None) -> tuple[int, ...] | None:
    """``--input-shape`` as ``(-1, ...)``; None when not given."""
    return parse_input_shape(text) if text is not None else None
