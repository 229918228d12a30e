"""The `ema` command group, whose commands are imported only when one of them runs.

``ema --help`` lists the commands from the one-line summaries below, so it imports none
of them (nor mlflow, torch or scipy, which they pull in): it answers in about a tenth of
a second instead of seconds (benchmarks/RESULTS.md).

While a command runs, the cyclic garbage collector starts a young-generation pass after
``GC_THRESHOLDS[0]`` new objects instead of CPython's 700 (as mypy does for its own run).
A command imports mlflow, torch, scipy and sqlalchemy: about 500,000 objects the collector
tracks, which live as long as the process. At the default thresholds it walks all of them
again, in full collections, every time they grew by a quarter: 1.2-1.3 s of a cached
``ema audit`` of 5 s (measured with ``gc.callbacks``), against about 0.25 s at these
thresholds. Garbage cycles are still collected, only in larger batches; the thresholds are
restored when the command returns, so a caller that invokes ``main`` in-process keeps its own.

The ``ema`` program is :func:`run`: ``main``, then ``gc.freeze`` before the interpreter exits.
An exiting interpreter collects and frees every object the process built: 1.2-1.4 s of a
cached ``ema audit`` (5.0-5.2 s with that teardown, 3.8-3.9 s without, the same audit run
in turn), for memory the operating system takes back at once. Frozen objects are left out.
"""

import gc
import importlib
import logging
import os
import signal
import sys
import time

import click

from ema import __version__
from ema_cli.exit_codes import epilog

#: Key of the root context's ``obj`` holding when the ``ema`` program started (``time.monotonic()``):
#: ``--timeout`` counts from there, the command's imports included. Unset (``main`` invoked
#: in-process, as the tests do), it counts from the command's own start.
STARTED = "started"

#: Each command: the module and attribute that define it, and the first line of its help (``ema --help`` shows it).
COMMANDS = {
    "train": (
        "ema_cli.train:train",
        "Train the target model f_D and register it.",
    ),
    "unlearn": (
        "ema_cli.unlearn:unlearn_command",
        "Remove --forget from --model by --method; register the result as a new version of the same model.",
    ),
    "calibrate": (
        "ema_cli.calibrate:calibrate",
        "Calibrate EMA for a registered target; reuses a cached calibration model when one matches.",
    ),
    "audit": (
        "ema_cli.audit:audit",
        "Was this query set used to train the model? Logs rho_EMA, the verdict and per-sample flags.",
    ),
    "demo": (
        "ema_cli.demo:demo",
        "Train, register, calibrate and audit the query sets M1..M6 and S (a table has no S).",
    ),
    "data": ("ema_cli.data:data", "Inspect and export data."),
    "mark": (
        "ema_cli.mark:mark",
        "Mark a share of your images with a secret trigger before sharing them; write the marked copy and the key.",
    ),
    "history": (
        "ema_cli.history:history",
        "List the finished audits of a model across runs and versions, newest first.",
    ),
    "compare": (
        "ema_cli.history:compare",
        "Audit runs side by side (RUN_ID...), or every version's audits of one query (--model NAME --query Q).",
    ),
    "power": (
        "ema_cli.power:power",
        "The smallest |D_q| at which the calibrated auditor calls a member set memorized with the given power.",
    ),
    "grid": (
        "ema_cli.grid:grid",
        "Run a study (paper, errors, unlearning): audits in child runs of one parent run, tables, figures.",
    ),
}


#: gc.set_threshold while a command runs: young-generation passes every 50,000 new objects, older
#: generations every 20 passes of the one below (CPython's defaults: 700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 20)


class LazyGroup(click.Group):
    """A group that imports a command's module only when that command is invoked or asked for help."""

    def main(self, *args, **kwargs):
        """Run the command line with the collector's ``GC_THRESHOLDS``, then restore the caller's thresholds."""
        previous = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLDS)
        try:
            return super().main(*args, **kwargs)
        finally:
            gc.set_threshold(*previous)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in COMMANDS.items()])


@click.group(cls=LazyGroup, epilog=epilog())
@click.version_option(__version__, prog_name="ema")
def main():
    """EMA audit workbench: was this data used to train this model, or has it been removed?"""
    # ema's warnings are shown whatever the root logger says: importing mlflow.pytorch runs
    # logging.basicConfig(level=logging.ERROR), which silenced every one of them after a torch model loaded
    logging.getLogger("ema").setLevel(logging.WARNING)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # else every run start imports IPython to look for a Databricks notebook (0.26 s)
    os.environ.setdefault("MLFLOW_ENABLE_SGC_RUN_RESUMPTION_FOR_DATABRICKS_JOBS", "false")
    # torch is imported later, lazily: idle OpenMP threads then sleep instead of spinning,
    # which on a small shared machine starved the main thread (benchmarks/RESULTS.md)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run(args: list[str] | None = None) -> None:
    """The ``ema`` program: :data:`main` on ``args`` (default: the command line), then a quick exit.

    ``main`` always ends in ``SystemExit`` here (click's standalone mode), whose code this
    passes on. Before that, ``gc.freeze`` moves every object the command built out of the
    collector's reach, so the interpreter's shutdown does not walk and free them one by one
    (see the module's docstring). Only for a process that is about to exit: tests and other
    callers that go on invoke ``main`` itself, which leaves the collector as it found it.
    """
    signal.signal(signal.SIGTERM, _terminated)
    try:
        main(option_spellings(sys.argv[1:] if args is None else args), prog_name="ema", obj={STARTED: time.monotonic()})
    finally:
        gc.freeze()


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, a job scheduler's stop) as an exit the command unwinds through: its open MLflow runs end
    FAILED, where the default handler killed the process and left them RUNNING for good."""
    raise SystemExit(128 + signum)


def option_spellings(args: list[str]) -> list[str]:
    """``args`` with every option name of underscores (``--threshold_mode``) spelled with hyphens, as commands take it.

    ``mlflow run -e audit -P threshold_mode=per-class`` passes a parameter the entry point does not
    declare as ``--threshold_mode per-class``: so spelled, every option of a command reaches it
    (flags, which take no value, do not). Values and the arguments after ``--`` are left alone.

    >>> option_spellings(["--query_file", "my_file.npz", "--max_query=5", "--", "--not_an_option"])
    ['--query-file', 'my_file.npz', '--max-query=5', '--', '--not_an_option']
    """
    end = args.index("--") if "--" in args else len(args)
    return [_hyphenated(word) if i < end else word for i, word in enumerate(args)]


def _hyphenated(word: str) -> str:
    if not word.startswith("--"):
        return word
    name, equals, value = word[2:].partition("=")
    return f"--{name.replace('_', '-')}{equals}{value}"
