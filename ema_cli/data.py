"""`ema data`: inspect data sources and export their splits."""

from pathlib import Path

import click

from ema.workflows.data import EXPORT_FORMATS, describe_source, export_query, export_splits
from ema.workflows.options import SOURCE_NAMES, EMAError
from ema_cli.options import (
    data_option,
    data_seed_option,
    image_options,
    label_column_option,
    max_query_option,
    one_line_error,
    query_file_option,
    query_option,
    root_option,
)


@click.group("data")
def data():
    """Inspect and export data."""


@data.command("show")
@click.argument("name", type=click.Choice(SOURCE_NAMES))
@root_option
@image_options
def show(name, root, image):
    """Print what data source NAME holds: images per split and class, shape, dtype, pixel range."""
    try:
        description = describe_source(name, root, image)
    except (EMAError, OSError) as exc:
        raise one_line_error(exc) from exc
    click.echo(f"{description.name}" + (f"  (root {description.root})" if description.root else ""))
    for summary in description.splits:
        click.echo(
            f"{summary.split}: {summary.n_images} images of {'x'.join(map(str, summary.image_shape))} {summary.dtype}, "
            f"pixels {summary.pixel_min}-{summary.pixel_max}, fingerprint {summary.fingerprint}"
        )
        for label, count in enumerate(summary.class_counts):
            class_name = description.classes[label] if label < len(description.classes) else "unknown class"
            click.echo(f"  {label}: {count}" if class_name == str(label) else f"  {label} {class_name}: {count}")


@data.command("splits")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for the .npz files.",
)
@data_option
@root_option
@image_options
@data_seed_option
def splits(out_dir, data_name, root, image, data_seed):
    """Write each split (train folds, calibration, M6, S) as .npz with arrays x, y, index."""
    try:
        for path, arrays in export_splits(out_dir, data_name, data_seed, root, image).items():
            unit = "rows" if arrays.kind == "table" else "images"
            click.echo(f"{path}  {len(arrays)} {unit}, fingerprint {arrays.fingerprint}")
    except (EMAError, OSError) as exc:
        raise one_line_error(exc) from exc


@data.command("export")
@click.option(
    "--format",
    "table_format",
    type=click.Choice(EXPORT_FORMATS),
    default="parquet",
    show_default=True,
    help=(
        "Table format: Parquet; images as label, index, pixels (bytes) and their height, width and channels; a table "
        "as label, index and its feature columns."
    ),
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder of the table (ema audit --query-table FOLDER).",
)
@query_option
@query_file_option
@label_column_option
@data_option
@root_option
@image_options
@data_seed_option
@max_query_option
def export(table_format, out_dir, query, query_file, label_column, data_name, root, image, data_seed, max_query):
    """Write a query as a table that --engine spark (or any Parquet reader) audits."""
    if (query is None) == (query_file is None):
        raise click.UsageError("give exactly one of --query NAME or --query-file FILE")
    try:
        arrays = export_query(
            out_dir,
            query=query,
            query_file=query_file,
            data=data_name,
            seed=data_seed,
            root=root,
            image=image,
            max_query=max_query,
            label_column=label_column,
        )
    except (EMAError, OSError) as exc:
        raise one_line_error(exc) from exc
    click.echo(f"{out_dir}  {len(arrays)} rows, {arrays.describe()} ({table_format}), fingerprint {arrays.fingerprint}")
