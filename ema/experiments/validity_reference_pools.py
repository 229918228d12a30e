"""The reference-auditor study's pools: three targets trained once, every pool scored once and cached, seeded draws.

Part of the validity study of the member-reference auditor
(:mod:`ema.experiments.validity_reference`). A pool holds the target's probabilities and the true
labels of one set: folds M1..M5, the calibration set, the held-out M6, the other domain S, and the
references scored again on inverted pixels. Queries are drawn from the pools with a seeded
generator, so every test of the study sees the same query sets.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import gettempdir

import numpy as np

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
KINDS = ("members", "same-domain", "other-domain", "mixture")
WRONG_SCALE_SUFFIX = "_inverted"
WRONG_SCALE_KEY = "cal" + WRONG_SCALE_SUFFIX

#: A pool: (probabilities of shape (n_samples, n_classes), labels of shape (n_samples,)).
Pool = tuple[np.ndarray, np.ndarray]


def score_pools(name: str, cache: Path, *, threads: int) -> dict[str, Pool]:
    """Probabilities and labels of folds M1..M5, calibration, M6 and the other domain; trained and cached once.

    ``threads`` fixes torch's thread count while training and scoring: float sums differ with it.
    """
    path = cache / f"pools_{name}.npz"
    complete = False
    if path.exists():
        with np.load(path) as stored:
            complete = WRONG_SCALE_KEY in stored.files
    if not complete:
        _train_and_score(name, path, threads)
    with np.load(path) as stored:
        pools = {key[:-2]: (stored[key], stored[key[:-2] + "_y"]) for key in stored.files if key.endswith("_p")}
        for key in stored.files:
            if key.endswith(WRONG_SCALE_SUFFIX):
                base = key[: -len(WRONG_SCALE_SUFFIX)]
                pools[f"{base}-wrong-scale"] = (stored[key], stored[base + "_y"])
        return pools


def _train_and_score(name: str, path: Path, threads: int) -> None:
    """Train target ``name`` with the workbench's recipe code and write every pool's scores to ``path``."""
    from ema.data.embedded import load_digits_28
    from ema.data.presets import load_splits
    from ema.training.fit import fit, predict_proba
    from ema.training.threads import use_threads

    use_threads(threads)
    data, spec, _ = TARGETS[name]
    splits = load_splits(data, 0)
    model = fit(spec, splits.train.model_inputs(), splits.train.y, progress=False, desc=f"train {name}")
    other = load_digits_28() if data == "mnist-embedded" else splits.other_domain
    sets = {f"M{i}": fold for i, fold in enumerate(splits.folds, start=1)}
    sets.update(cal=splits.calibration, M6=splits.held_out, S=other)
    arrays = {}
    for key, part in sets.items():
        arrays[f"{key}_p"], arrays[f"{key}_y"] = predict_proba(model, part.model_inputs()), part.y
    # The same references with inverted pixels (1 - x): an oracle fed inputs preprocessed unlike training.
    # (Multiplying by 255 would not do: these ReLU MLPs keep 0.91-0.94 accuracy on 0..255 inputs.)
    for key in ("cal", *(f"M{i}" for i in range(2, 6))):
        arrays[f"{key}{WRONG_SCALE_SUFFIX}"] = predict_proba(model, np.float32(1.0) - sets[key].model_inputs())
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def member_reference(pools: dict[str, Pool]) -> Pool:
    """Folds M2..M5 joined: the member reference of a query drawn from M1 (never the query's own samples)."""
    return tuple(np.concatenate([pools[f"M{i}"][j] for i in range(2, 6)]) for j in (0, 1))


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
