"""`ema history` and `ema compare`: read audits back from the tracking store."""

import click

from ema.workflows.options import VERDICTS
from ema_cli.options import reading_command

#: What the tables show where a run logged no value (a calibrated audit has no rho_EMA).
MISSING = "-"
#: The most characters of a cell ``ema history`` prints (a failed audit's error is often longer).
ERROR_CHARS = 80
#: The most characters of a cell ``ema compare`` prints (a members or route description is often longer).
COMPARE_CHARS = 60


@click.command("history")
@click.option("--model", "model_name", required=True, help="Registered model name.")
@click.option("--query", help="Only audits of this query set.")
@click.option(
    "--verdict",
    type=click.Choice(VERDICTS),
    help="Only audits where any of their methods said this verdict, not only the first method, whose verdict is the "
    "run's (an ema+calibrated audit's is EMA's even where the calibrated auditor says memorized); the column said_by "
    "names the methods that said it.",
)
@click.option(
    "--all",
    "include_all",
    is_flag=True,
    help="Also failed and unfinished audits (a RUNNING one whose process is gone shows as STALE), with why each "
    "failed one failed (its run's tag ema.error, cut to 80 characters here).",
)
@reading_command
def history(model_name, query, verdict, include_all):
    """List the finished audits of a model across runs and versions, newest first."""
    import pandas as pd

    from ema.workflows.history import audit_history, registered_model

    table = audit_history(model_name, query=query, verdict=verdict, include_all=include_all)
    if table.empty:
        registered_model(model_name)  # no audits and no such model: a typo, said as one
        filters = " and ".join(
            f for f in (query and f"query {query!r}", verdict and f"a method's verdict {verdict}") if f
        )
        among = f" with {filters}" if filters else ""
        finished = "" if include_all else " (finished ones; --all for every audit)"
        click.echo(f"no audits of {model_name!r}{among} found{finished}")
        return
    with pd.option_context("display.width", 200, "display.max_columns", None):
        click.echo(shown(table, index=False, max_colwidth=ERROR_CHARS))


@click.command("compare")
@click.argument("run_ids", nargs=-1)
@click.option("--model", "model_name", help="With --query: every version of this registered model, side by side.")
@click.option("--query", help="With --model: the query set (or file-<fingerprint>) whose audits to line up.")
@reading_command
def compare(run_ids, model_name, query):
    """Audit runs side by side (RUN_ID...), or every version's audits of one query (--model NAME --query Q)."""
    if bool(run_ids) == bool(model_name or query) or bool(model_name) != bool(query):
        raise click.UsageError("give either RUN_ID... or both --model NAME and --query Q")
    import pandas as pd

    from ema.workflows.history import compare_runs, version_trail

    with pd.option_context("display.width", 200, "display.max_columns", None):
        if run_ids:
            click.echo(shown(compare_runs(list(run_ids)), max_colwidth=COMPARE_CHARS))
            return
        trail = version_trail(model_name, query=query)
        if not len(trail):
            click.echo(f"no audits of {query!r} on {model_name!r} found")
            return
        click.echo(shown(trail, index=False, max_colwidth=COMPARE_CHARS))


def shown(table, *, index: bool = True, max_colwidth: int | None = None) -> str:
    """``table`` as text, every missing value written as :data:`MISSING`: a float column's NaN and a text column's None
    (which ``na_rep`` leaves as ``None``); numbers keep their own formatting, and a number among text (``compare``'s
    metrics beside params) its significant digits (pandas writes 1.4e-14 there as 0.0). A cell longer than
    ``max_colwidth`` characters is cut there, ending in ``...`` (``to_string`` ignores ``display.max_colwidth``)."""
    text = table.select_dtypes(include=["object", "str"]).columns
    filled = table.assign(**{c: table[c].map(_text_cell) for c in text})
    return filled.to_string(na_rep=MISSING, index=index, max_colwidth=max_colwidth)


def _text_cell(value: object) -> object:
    if value is None or (isinstance(value, float) and value != value):
        return MISSING
    return f"{value:.7g}" if isinstance(value, float) else value
