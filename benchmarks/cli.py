"""``cli``: what a user waits for at the command line, against the imports no command can avoid.

Each figure is a whole process, started fresh, timed from ``exec`` to exit:

- ``ema --help``: against ``python -c "import ema, mlflow, torch"`` (what ``--help`` paid before
  the commands were imported lazily); the goal is absolute, under 0.5 s;
- a cached ``ema audit --model models:/ema-target@target --query M6`` (2,000 images; the
  target trained and its calibration model cached by an untimed first audit): against the
  same import line; the goal is a ratio, at most 1.25x those imports, so that it holds on a
  slower machine too. The note also gives the floors no audit can go under: the same imports
  plus those the audit needs whatever it does (``scipy.stats`` for the paper's tests, which
  ``sklearn.metrics`` imports too; MLflow's sqlalchemy store, opened), both and each alone, so
  that the note says which of them already exceeds the goal. The report's figures are SVG
  written by :mod:`ema.reports.svg` (no matplotlib, which drew them in 0.8 s of the 5.2 s this
  audit took before); the same audit with ``--no-figures`` (nothing drawn) is timed in the same
  rounds and recorded beside it, against the same imports, to show what the figures cost.

The commands run as the ``ema`` program does (:func:`ema_cli.cli.run`, which raises the
collector's thresholds while a command runs and freezes its objects before the interpreter's
teardown), and so do the floors (:func:`as_ema_runs`): the baseline import line pays a teardown
that frees every object its imports built, which the program skips, so floors timed without the
program's collector settings would count that teardown against the floor and overstate it. The
note also times the import line itself as the program runs it, so that it says how much of the
audit's time beyond the baseline is the baseline's own teardown.

The processes run in turn in every round, so the machine's slow phases fall on all of them, and
with Python's default bytecode cache (:func:`user_environment`), as on a user's machine.

An audit also writes its run to the store, which the import line never does: each write is a
sqlite commit that syncs the disk (MLflow leaves sqlite's ``synchronous=FULL``). The note says how
many write commits the cached audit makes (:data:`COUNT_WRITES`, one untimed audit) and what one
costs on the disk the store is on (:func:`write_commit_seconds`), so that a ratio measured on a
machine whose disk syncs slowly can be read: there the same audit pays those commits many times
over, and no import line does.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import Config, interleaved, progress, row, spread, temporary_store

NAME = "cli"
CLI = [sys.executable, "-c", "from ema_cli.cli import run; run()"]
IMPORTS = [sys.executable, "-c", "import ema, mlflow, torch"]
IMPORTS_LABEL = '`python -c "import ema, mlflow, torch"`'
#: What every audit needs beyond the import line, by part: the paper's tests, the store (opened).
FLOOR_PARTS = {
    "scipy.stats": "import scipy.stats",
    "the store": "from ema.tracking.runs import configure; configure()",
}


def as_ema_runs(code: str) -> list[str]:
    """``python -c code`` with the collector settings of the ``ema`` program: its thresholds, then a freeze at exit."""
    settings = "import gc; from ema_cli.cli import GC_THRESHOLDS; gc.set_threshold(*GC_THRESHOLDS)"
    return [*IMPORTS[:2], f"{settings}; {code}; gc.freeze()"]


def floor_command(*parts: str) -> list[str]:
    """The import line plus the named :data:`FLOOR_PARTS`, as one process run as the ``ema`` program runs."""
    return as_ema_runs("; ".join([IMPORTS[2], *(FLOOR_PARTS[part] for part in parts)]))


#: The floors timed: the import line alone, all parts, and each part alone.
FLOORS = {
    "imports as ema runs": floor_command(),
    "floor": floor_command(*FLOOR_PARTS),
    **{part: floor_command(part) for part in FLOOR_PARTS},
}
AUDIT = ["audit", "--model", "models:/ema-target@target", "--query", "M6", "--no-progress"]
NO_FIGURES = [*AUDIT, "--no-figures"]
#: Python that counts the transactions that wrote to any store of the process, and prints the count last on stderr.
WRITE_COUNTER = """
import atexit, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
writes = []
@event.listens_for(Engine, "before_cursor_execute")
def seen(conn, cursor, statement, *rest):
    if statement.lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
        conn.info["wrote"] = True
@event.listens_for(Engine, "commit")
def committed(conn):
    if conn.info.pop("wrote", False):
        writes.append(1)
atexit.register(lambda: print(len(writes), file=sys.stderr))
"""
#: The ``ema`` program, counting its write transactions (:data:`WRITE_COUNTER`).
COUNT_WRITES = [sys.executable, "-c", WRITE_COUNTER + "from ema_cli.cli import run\nrun()\n"]
#: Commits timed by :func:`write_commit_seconds`.
WRITE_PROBES = 30
HELP_GOAL = 0.5
#: audit / imports at most.
AUDIT_GOAL = 1.25


#: Set on some CI machines (this project's included): every process would then compile ema's modules
#: from source, which no installed copy does (pip compiles them) and an editable one does once.
NO_BYTECODE = "PYTHONDONTWRITEBYTECODE"


def user_environment() -> dict[str, str]:
    """This process's environment less :data:`NO_BYTECODE`, so the timed processes read cached bytecode."""
    return {name: value for name, value in os.environ.items() if name != NO_BYTECODE}


def run(command: list[str]) -> None:
    subprocess.run(command, check=True, capture_output=True, env=user_environment())


def count_writes(command: list[str]) -> int:
    """How many transactions that wrote to a store ``command`` committed (:data:`COUNT_WRITES` and its arguments)."""
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return int(done.stderr.strip().splitlines()[-1])


def write_commit_seconds(folder: Path) -> float:
    """Median seconds of a one-row sqlite commit in ``folder``, synced as MLflow's store syncs (sqlite's defaults)."""
    path = folder / "write-probe.db"
    connection = sqlite3.connect(path)
    try:
        connection.execute("CREATE TABLE probe (n INTEGER)")
        connection.commit()
        times = []
        for n in range(WRITE_PROBES):
            start = time.perf_counter()
            connection.execute("INSERT INTO probe VALUES (?)", (n,))
            connection.commit()
            times.append(time.perf_counter() - start)
    finally:
        connection.close()
        path.unlink()
    return statistics.median(times)


def measure(config: Config) -> list[dict]:
    """Median seconds of ``ema --help`` and of a cached ``ema audit`` process, the imports timed in the same rounds."""
    from ema.training.spec import TrainSpec
    from ema.workflows.train import train_target

    repeats = config.cheap_repeats()
    with temporary_store():
        progress("cli: training the target, then one untimed audit that caches its calibration")
        train_target(TrainSpec(epochs=5 if config.quick else 50), progress=False)
        run([*CLI, *AUDIT])
        writes = count_writes([*COUNT_WRITES, *AUDIT])
        commit = write_commit_seconds(Path.cwd())
        progress(f"cli: ema --help, ema audit and the imports, {repeats} interleaved rounds")
        times = interleaved(
            {
                "imports": lambda: run(IMPORTS),
                "help": lambda: run([*CLI, "--help"]),
                "audit": lambda: run([*CLI, *AUDIT]),
                "no figures audit": lambda: run([*CLI, *NO_FIGURES]),
                **{name: (lambda command=command: run(command)) for name, command in FLOORS.items()},
            },
            repeats,
        )
    imports, help_, audit, no_figures, floor, program_imports = (
        statistics.median(times[k])
        for k in ("imports", "help", "audit", "no figures audit", "floor", "imports as ema runs")
    )
    return [
        against_imports(
            "ema --help",
            help_,
            imports,
            ratio_label="help / imports",
            goal=f"< {HELP_GOAL:g} s",
            met=help_ < HELP_GOAL,
            repeats=repeats,
            note=f"help {spread(times['help'])}, imports {spread(times['imports'])}",
        ),
        against_imports(
            "ema audit --query M6 (2,000 images, calibration cached), whole process",
            audit,
            imports,
            ratio_label="audit / imports",
            goal=f"<= {AUDIT_GOAL:g}x imports",
            met=audit / imports <= AUDIT_GOAL,
            repeats=repeats,
            note=(
                f"audit {spread(times['audit'])}, imports {spread(times['imports'])}; "
                f"audit - imports = {audit - imports:.2f} s; the import line run as ema runs (no teardown) "
                f"{spread(times['imports as ema runs'])}, {program_imports / imports:.2f}x imports, "
                f"audit / it = {audit / program_imports:.2f}x; floors, run as ema runs: all (imports, "
                f"scipy.stats, the store opened) {spread(times['floor'])}, {floor / imports:.2f}x "
                f"imports, audit / floor = {audit / floor:.2f}x; each part alone: "
                + ", ".join(f"{part} {statistics.median(times[part]) / imports:.2f}x" for part in FLOOR_PARTS)
                + f"; the audit's store writes: {writes} write commits, {commit * 1000:.2f} ms each on this disk "
                f"(sqlite, synchronous=FULL, median of {WRITE_PROBES}), {writes * commit:.3f} s in all"
            ),
        ),
        against_imports(
            "ema audit --query M6 --no-figures (the same audit, no figure drawn), whole process",
            no_figures,
            imports,
            ratio_label="audit --no-figures / imports",
            goal="recorded",
            met=None,
            repeats=repeats,
            note=(
                f"audit --no-figures {spread(times['no figures audit'])}, imports {spread(times['imports'])}; "
                f"the default audit in the same rounds {audit:.2f} s, {no_figures / audit:.2f}x of it "
                f"({audit - no_figures:.2f} s for its SVG figures)"
            ),
        ),
    ]


def against_imports(
    case: str, seconds: float, imports: float, *, ratio_label: str, goal: str, met: bool | None, repeats: int, note: str
) -> dict:
    """A result row for a whole process, timed against the import line in the same rounds."""
    return row(
        NAME,
        case,
        ours=seconds,
        baseline=imports,
        unit="s",
        baseline_label=IMPORTS_LABEL,
        ratio=seconds / imports,
        ratio_label=ratio_label,
        goal=goal,
        met=met,
        repeats=repeats,
        note=note,
    )
