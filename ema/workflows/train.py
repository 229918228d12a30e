"""Train a target model on the training folds and register it with its recipe."""

from __future__ import annotations

from dataclasses import dataclass

from ema.data.presets import DEFAULT_DATA, load_splits
from ema.tracking import keys
from ema.tracking.registry import RegisteredVersion, log_and_register
from ema.tracking.runs import log_dataset, log_metrics, log_params, start_run
from ema.training.devices import CPU, describe_device, resolve_device
from ema.training.recipes import TorchRecipe, recipe_to_json
from ema.training.spec import TrainSpec
from ema.validation import check_alias, check_model_name


@dataclass(frozen=True)
class TrainOutcome:
    run_id: str
    version: RegisteredVersion
    train_accuracy: float
    held_out_accuracy: float


def train_target(
    spec: TrainSpec,
    *,
    data: str = DEFAULT_DATA,
    data_seed: int = 0,
    data_root: str | None = None,
    model_name: str = keys.TARGET_MODEL_NAME,
    alias: str = keys.TARGET_ALIAS,
    progress: bool = True,
    device: str = CPU,
) -> TrainOutcome:
    """Train f_D on the five training folds on ``device``, log accuracies, register it under ``alias``.

    The version's tags record the recipe and the training data's fingerprint, so a
    calibration model can be trained with the same algorithm A. ``device`` (``auto``, ``cpu``,
    ``cuda[:N]``) is resolved before the run starts and recorded as its ``device`` param; the
    model is registered with CPU tensors whatever it trained on.
    """
    from ema.training.fit import fit, predict_proba

    device = resolve_device(device)
    splits = load_splits(data, data_seed, data_root)
    train, held_out = splits.train, splits.held_out
    with start_run(f"train {spec.arch} {model_name}") as run:
        check_model_name("model name", model_name)
        check_alias("alias", alias)
        log_params(
            {
                **spec.to_dict(),
                keys.PARAM_DATA: data,
                keys.PARAM_DATA_SEED: data_seed,
                keys.PARAM_DEVICE: describe_device(device),
            }
        )
        log_dataset(train, name=f"{data}/train", context="training")
        model = fit(spec, train.model_inputs(), train.y, progress=progress, desc="train target", device=device)
        train_acc = float((predict_proba(model, train.model_inputs()).argmax(1) == train.y).mean())
        held_acc = float((predict_proba(model, held_out.model_inputs()).argmax(1) == held_out.y).mean())
        log_metrics({keys.METRIC_TRAIN_ACCURACY: train_acc, keys.METRIC_HELD_OUT_ACCURACY: held_acc})
        from ema.training.packaging import package_torch_model  # torch: only when a model is logged

        with package_torch_model(model, train.x[:2]) as package:
            version = log_and_register(
                package,
                name=model_name,
                alias=alias,
                tags={
                    keys.TAG_ROLE: keys.ROLE_TARGET,
                    keys.TAG_RECIPE: recipe_to_json(TorchRecipe(spec)),
                    keys.TAG_DATA_SOURCE: data,
                    keys.TAG_DATA_SEED: str(data_seed),
                    **({keys.TAG_DATA_ROOT: str(data_root)} if data_root else {}),
                    keys.TAG_DATA_FINGERPRINT: train.fingerprint,
                },
            )
    return TrainOutcome(run.info.run_id, version, train_acc, held_acc)
