"""The `ema` command group."""

import os

import click

from ema import __version__
from ema_cli.audit import audit
from ema_cli.calibrate import calibrate
from ema_cli.data import data
from ema_cli.demo import demo
from ema_cli.grid import grid
from ema_cli.history import compare, history
from ema_cli.power import power
from ema_cli.train import train
from ema_cli.unlearn import unlearn_command


@click.group()
@click.version_option(__version__, prog_name="ema")
def main():
    """EMA audit workbench: was this data used to train this model, or has it been removed?"""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # torch is imported later, lazily: idle OpenMP threads then sleep instead of spinning,
    # which on a small shared machine starved the main thread (benchmarks/RESULTS.md)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


for command in (train, unlearn_command, calibrate, audit, demo, data, history, compare, power, grid):
    main.add_command(command)
