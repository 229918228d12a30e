"""`ema mark`: mark a share of the owner's images with a secret trigger; write the marked copy and the key."""

import click

from ema.workflows.options import DEFAULT_MARK_RATE, EMAError
from ema_cli.options import label_column_option, max_query_option, one_line_error


@click.command("mark")
@click.option("--in", "in_path", type=click.Path(dir_okay=False), required=True, help="Your image set (.npz).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), required=True, help="The marked copy (.npz).")
@click.option(
    "--key",
    "key_path",
    type=click.Path(dir_okay=False),
    required=True,
    help="Where the secret key is written (a new file, mode 0600). Keep it secret: it can remove the mark too.",
)
@click.option(
    "--rate",
    type=float,
    default=DEFAULT_MARK_RATE,
    show_default=True,
    help="Share of the images marked.",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    help="Seed of the trigger and the marked rows. Default: 128 random bits (a small seed can be guessed).",
)
@label_column_option
@max_query_option
def mark(in_path, out_path, key_path, rate, seed, label_column, max_query):
    """Mark a share of your images with a secret trigger before sharing them; write the marked copy and the key.

    Nothing goes to the tracking store: the key is yours alone.
    """
    from ema.workflows.marks import mark_file

    try:
        outcome = mark_file(
            in_path, out_path, key_path, rate=rate, seed=seed, max_images=max_query, label_column=label_column
        )
    except (EMAError, OSError) as exc:
        raise one_line_error(exc) from exc
    plural = "s" if outcome.n_decoys != 1 else ""
    decoys = f" and {outcome.n_decoys} decoy{plural} (labels kept)" if outcome.n_decoys else ""
    click.echo(
        f"marked {outcome.n_marked} of {outcome.n_images} images{decoys}: {outcome.out} (fingerprint "
        f"{outcome.fingerprint}); key {outcome.key} (mode 0600, keep it secret)"
    )
