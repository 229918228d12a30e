"""The options of a calibration model the user supplies (``ema audit``, ``ema power``), defined once."""

from __future__ import annotations

import click

from ema_cli.options import compose

supplied_calibration_options = compose(
    click.option("--calibration-model", help="An already-trained calibration model URI (instead of training one)."),
    click.option(
        "--calibration-members",
        type=click.Path(dir_okay=False),
        help="With --calibration-model: a set file (.npz, .csv, .parquet) of the samples it was trained on.",
    ),
    click.option(
        "--calibration-nonmembers",
        type=click.Path(dir_okay=False),
        help="With --calibration-model: a set file (.npz, .csv, .parquet) of samples it was not trained on.",
    ),
)


def supplied_calibration(model: str | None, members: str | None, nonmembers: str | None):
    """The :data:`supplied_calibration_options` as one ``SuppliedCalibration``; None when none is given.

    Raises
    ------
    click.UsageError
        When only some of the three are given.
    """
    from ema.workflows.audit import SuppliedCalibration

    given = (model, members, nonmembers)
    if not any(given):
        return None
    if not all(given):
        raise click.UsageError("--calibration-model needs --calibration-members and --calibration-nonmembers")
    return SuppliedCalibration(*given)
