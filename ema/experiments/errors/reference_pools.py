"""The reference-auditor study's pools: the targets trained once, every pool scored once and cached, seeded draws.

Part of the validity study of the member-reference auditor
(:mod:`ema.experiments.errors.reference`). A pool holds the target's probabilities and the true
labels of one set: folds M1..M5, the calibration set, the held-out M6, the other domain S, and the
references scored again on inverted pixels. Queries are drawn from the pools with a seeded
generator, so every test of the study sees the same query sets.

Two more kinds of pool serve issue 26's grid (:mod:`ema.experiments.errors.certification`), which
uses M1..M5, the calibration set and M6 alone: the image targets scored on the 9 views of every
image (``--augment shifts``: probabilities of shape (9, n, C), the identity first, as ``ema audit
--augment shifts`` hands them to the auditor), and the table target of :data:`TABLE_TARGETS`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from tempfile import gettempdir

import numpy as np

from ema.data.arrays import ArraySet
from ema.data.shifts import AUGMENT_NONE, AUGMENT_SHIFTS, N_SHIFT_VIEWS, shift_views
from ema.data.splits import Splits
from ema.training.recipes import DEFAULT_TABLE_RECIPE
from ema.training.spec import TrainSpec

DEFAULT_CACHE = Path(gettempdir()) / "ema-reference-auditor"
#: name -> (data source, recipe, label)
TARGETS: dict[str, tuple[str, TrainSpec, str]] = {
    "overfit": (
        "mnist-embedded",
        TrainSpec(),
        "overfit: paper recipe (MLP 256-256, SGD 0.05, 50 epochs), embedded MNIST",
    ),
    "generalising": (
        "mnist-embedded",
        TrainSpec(epochs=5, weight_decay=1e-3),
        "generalising: same MLP, 5 epochs, weight decay 1e-3, embedded MNIST",
    ),
    "fashion": ("fashion", TrainSpec(), "Fashion-MNIST: paper recipe at the paper's sizes (5 x 2,000 training images)"),
}
#: name -> (data source, recipe, label) of the table target of issue 26's grid (the any-data issue's: no other
#: domain, no pixels to shift), trained as ``ema train`` trains a table by default.
TABLE_TARGETS: dict[str, tuple[str, dict, str]] = {
    "breast-cancer": (
        "breast-cancer",
        DEFAULT_TABLE_RECIPE,
        "breast-cancer: extremely randomized trees (the default table recipe), scikit-learn's Breast Cancer "
        "(5 x 63 training rows)",
    ),
}
KINDS = ("members", "same-domain", "other-domain", "mixture")
WRONG_SCALE_SUFFIX = "_inverted"
WRONG_SCALE_KEY = "cal" + WRONG_SCALE_SUFFIX

#: A pool: (probabilities of shape (n_samples, n_classes), labels of shape (n_samples,)).
Pool = tuple[np.ndarray, np.ndarray]


def score_pools(name: str, cache: Path, *, threads: int, augment: str = AUGMENT_NONE) -> dict[str, Pool]:
    """Probabilities and labels of folds M1..M5, calibration, M6 and the other domain; trained and cached once.

    ``threads`` fixes torch's thread count while training and scoring: float sums differ with it.
    With ``augment="shifts"`` (image targets) each pool holds the 9 views' probabilities, (9, n, C),
    of M1..M5, the calibration set and M6 only; a table target (:data:`TABLE_TARGETS`) has those
    sets too, with one view.
    """
    path = cache / (f"pools_{name}.npz" if augment == AUGMENT_NONE else f"pools_{name}_{augment}.npz")
    if not _cached(path, name, augment):
        if name in TABLE_TARGETS:
            _train_and_score_table(name, path)
        else:
            _train_and_score(name, path, threads, augment)
    with np.load(path) as stored:
        pools = {key[:-2]: (stored[key], stored[key[:-2] + "_y"]) for key in stored.files if key.endswith("_p")}
        for key in stored.files:
            if key.endswith(WRONG_SCALE_SUFFIX):
                base = key[: -len(WRONG_SCALE_SUFFIX)]
                pools[f"{base}-wrong-scale"] = (stored[key], stored[base + "_y"])
        return pools


def _cached(path: Path, name: str, augment: str) -> bool:
    """Whether ``path`` holds every pool of its kind (plain image pools of older runs lack the inverted ones)."""
    if not path.exists():
        return False
    plain_image = augment == AUGMENT_NONE and name not in TABLE_TARGETS
    with np.load(path) as stored:
        return (WRONG_SCALE_KEY if plain_image else "M6_p") in stored.files


def _train_and_score(name: str, path: Path, threads: int, augment: str) -> None:
    """Train image target ``name`` with the workbench's recipe code and write every pool's scores to ``path``."""
    from ema.data.embedded import load_digits_28
    from ema.data.presets import load_splits
    from ema.inputs import to_model_inputs
    from ema.training.fit import fit, predict_proba
    from ema.training.threads import use_threads

    use_threads(threads)
    data, spec, _ = TARGETS[name]
    splits = load_splits(data, 0)
    model = fit(spec, splits.train.model_inputs(), splits.train.y, progress=False, desc=f"train {name}")
    sets = _grid_sets(splits)
    if augment == AUGMENT_SHIFTS:

        def views(part) -> np.ndarray:
            shifted = to_model_inputs(shift_views(part.x).reshape(-1, *part.x.shape[1:]))
            return predict_proba(model, shifted).reshape(N_SHIFT_VIEWS, len(part), -1)

        _save(path, _scored(sets, views))
        return
    sets["S"] = load_digits_28() if data == "mnist-embedded" else splits.other_domain
    arrays = _scored(sets, lambda part: predict_proba(model, part.model_inputs()))
    # The same references with inverted pixels (1 - x): an oracle fed inputs preprocessed unlike training.
    # (Multiplying by 255 would not do: these ReLU MLPs keep 0.91-0.94 accuracy on 0..255 inputs.)
    for key in ("cal", *(f"M{i}" for i in range(2, 6))):
        arrays[f"{key}{WRONG_SCALE_SUFFIX}"] = predict_proba(model, np.float32(1.0) - sets[key].model_inputs())
    _save(path, arrays)


def _train_and_score_table(name: str, path: Path) -> None:
    """Train table target ``name`` as ``ema train`` trains a table, and write its folds', calibration's and M6's
    scores to ``path`` (a table has no other domain, and no pixels to invert)."""
    from ema.data.presets import load_splits
    from ema.training.recipes import recipe_from_dict
    from ema.workflows.train import fit_target

    data, recipe, _ = TABLE_TARGETS[name]
    splits = load_splits(data, 0)
    classifier = fit_target(recipe_from_dict(recipe), splits.train, progress=False)
    _save(path, _scored(_grid_sets(splits), lambda part: classifier.predict_proba(part.model_inputs())))


def _grid_sets(splits: Splits) -> dict[str, ArraySet]:
    """The sets every target scores, by pool name: folds M1..M5, the calibration set and M6."""
    sets = {f"M{i}": fold for i, fold in enumerate(splits.folds, start=1)}
    sets.update(cal=splits.calibration, M6=splits.held_out)
    return sets


def _scored(sets: dict, predict: Callable[[ArraySet], np.ndarray]) -> dict[str, np.ndarray]:
    """``{name}_p`` (``predict`` of the set) and ``{name}_y`` (its labels) of every set: the cache file's arrays."""
    arrays = {}
    for key, part in sets.items():
        arrays[f"{key}_p"], arrays[f"{key}_y"] = predict(part), part.y
    return arrays


def _save(path: Path, arrays: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def member_reference(pools: dict[str, Pool]) -> Pool:
    """Folds M2..M5 joined (:func:`join_pools`): the member reference of a query drawn from M1 (never the query's
    own samples)."""
    return join_pools([pools[f"M{i}"] for i in range(2, 6)])


def join_pools(pools: list[Pool]) -> Pool:
    """Pools joined along the samples' axis, so that shifted pools (9 views, (9, n, C)) keep their views."""
    return np.concatenate([p for p, _ in pools], axis=-2), np.concatenate([y for _, y in pools])


def draw(pools: dict[str, Pool], kind: str, size: int, rng: np.random.Generator) -> Pool:
    """A query of ``size`` samples of ``kind``, drawn without replacement; a mixture is half M1, half M6."""
    parts = {"members": [("M1", size)], "same-domain": [("M6", size)], "other-domain": [("S", size)]}.get(
        kind, [("M1", size // 2), ("M6", size - size // 2)]
    )
    chosen = [(pools[name], rng.choice(pools[name][1].size, n, replace=False)) for name, n in parts]
    return tuple(np.concatenate([pool[j][idx] for pool, idx in chosen]) for j in (0, 1))


def truth(kind: str, size: int) -> float:
    """The retained fraction of a query of ``kind`` and ``size`` (a mixture holds ``size // 2`` members)."""
    return {"members": 1.0, "mixture": (size // 2) / size}.get(kind, 0.0)
