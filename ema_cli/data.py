"""`ema data`: inspect and export the built-in splits."""

from pathlib import Path

import click

from ema.data.files import write_set
from ema.errors import EMAError
from ema.workflows.sources import load_splits
from ema_cli.options import data_seed_option


@click.group("data")
def data():
    """Inspect and export data."""


@data.command("splits")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True, help="Folder for the .npz files.")
@data_seed_option
def splits(out_dir, data_seed):
    """Write each split (train folds, calibration, M6, S) as .npz with arrays x, y, index."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, arrays in load_splits(seed=data_seed).as_dict().items():
            path = write_set(arrays, out_dir / f"{name}.npz")
            click.echo(f"{path}  {len(arrays)} images, fingerprint {arrays.fingerprint}")
    except (EMAError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
