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

An audit also writes its run to the store, which the import line never does. In MLflow's default
journal (rollback, ``synchronous=FULL``) each write is a sqlite commit that syncs the disk four
times; the workbench's stores are in WAL mode and sync at checkpoints
(:mod:`ema.tracking.sqlite_sync`). The note says how many write commits the cached audit makes
(:data:`COUNT_WRITES`, one untimed audit) and what one costs on the disk the store is on, in both
journals (:func:`write_commit_seconds`). A last row times the same audit on a disk whose every sync
takes :data:`SLOW_SYNC_US` longer (strace's fault injection, :func:`slow_syncs`; skipped without
strace), against the import line under the same strace, and, in the same rounds, the audit of a copy
of the store in MLflow's default journal (:func:`rollback_copy`): what the goal's "on any machine"
costs a store that syncs every commit.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import Config, interleaved, progress, row, spread, temporary_store
from ema.tracking.sqlite_sync import create_in_wal_mode

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


def run(command: list[str], *, store: str | None = None) -> None:
    """``command`` in :func:`user_environment`, against the tracking URI ``store`` where one is given."""
    env = user_environment() | ({"MLFLOW_TRACKING_URI": store} if store else {})
    subprocess.run(command, check=True, capture_output=True, env=env)


def count_writes(command: list[str]) -> int:
    """How many transactions that wrote to a store ``command`` committed (:data:`COUNT_WRITES` and its arguments)."""
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return int(done.stderr.strip().splitlines()[-1])


#: How much longer every fsync and fdatasync takes on the simulated slow disk, in microseconds.
SLOW_SYNC_US = 20_000


def write_commit_seconds(folder: Path, *, wal: bool) -> float:
    """Median seconds of a one-row sqlite commit in ``folder``: in WAL mode at ``synchronous=NORMAL``, as the
    workbench's stores commit, or (``wal=False``) in sqlite's defaults, which MLflow keeps."""
    path = folder / "write-probe.db"
    if wal:
        create_in_wal_mode(path)
    connection = sqlite3.connect(path)
    try:
        if wal:
            connection.execute("PRAGMA synchronous=NORMAL")
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


def slow_syncs(command: list[str]) -> list[str]:
    """``command`` on a disk whose every sync takes :data:`SLOW_SYNC_US` longer: strace delays each return."""
    return [
        *("strace", "-f", "--seccomp-bpf", "-qq", "-o", os.devnull, "-e", "trace=fsync,fdatasync"),
        *("-e", f"inject=fsync,fdatasync:delay_exit={SLOW_SYNC_US}", *command),
    ]


def rollback_copy(db: Path, folder: Path) -> str:
    """A copy of the store ``db`` in ``folder``, in MLflow's default journal (rollback); its tracking URI.

    sqlite's backup takes what the log holds too; the copy's runs keep their artifacts where the original's are.
    """
    folder.mkdir()
    copy = folder / db.name
    with sqlite3.connect(db) as source, sqlite3.connect(copy) as target:
        source.backup(target)
        target.execute("PRAGMA journal_mode=DELETE")
    return f"sqlite:///{copy}"


def slow_sync_row(repeats: int) -> dict:
    """The cached audit and the import line, each under :func:`slow_syncs`, with the audit of a
    :func:`rollback_copy` of the store in the same rounds (the working directory is the store's folder)."""
    if shutil.which("strace") is None:
        return {
            "benchmark": NAME,
            "skipped": "the audit on a slow disk: strace is not installed (apt-get install strace)",
        }
    folder = Path.cwd()
    rollback = rollback_copy(folder / "mlflow.db", folder / "rollback")
    progress(f"cli: the audit on a disk whose syncs take {SLOW_SYNC_US / 1000:g} ms longer, {repeats} rounds")
    times = interleaved(
        {
            "imports": lambda: run(slow_syncs(IMPORTS)),
            "audit": lambda: run(slow_syncs([*CLI, *AUDIT])),
            "rollback": lambda: run(slow_syncs([*CLI, *AUDIT]), store=rollback),
        },
        repeats,
    )
    imports, audit, rollback_audit = (statistics.median(times[k]) for k in ("imports", "audit", "rollback"))
    return audit_row(
        f"ema audit --query M6, every disk sync {SLOW_SYNC_US / 1000:g} ms slower (strace), whole process",
        audit,
        imports,
        ratio_label="audit / imports, both under strace",
        repeats=repeats,
        note=(
            f"audit {spread(times['audit'])}, imports {spread(times['imports'])}; the same audit of a copy of the "
            f"store in MLflow's default journal (rollback, synchronous=FULL), in the same rounds: "
            f"{spread(times['rollback'])}, {rollback_audit / imports:.2f}x imports"
        ),
    )


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
        commit, rollback_commit = (write_commit_seconds(Path.cwd(), wal=wal) for wal in (True, False))
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
        slow_disk = slow_sync_row(repeats)
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
        audit_row(
            "ema audit --query M6 (2,000 images, calibration cached), whole process",
            audit,
            imports,
            ratio_label="audit / imports",
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
                f"as the store commits (WAL, synchronous=NORMAL; median of {WRITE_PROBES}), {writes * commit:.3f} s "
                f"in all; {rollback_commit * 1000:.2f} ms each in MLflow's default journal (rollback, synchronous=FULL)"
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
        slow_disk,
    ]


def audit_row(case: str, audit: float, imports: float, *, ratio_label: str, repeats: int, note: str) -> dict:
    """:func:`against_imports` for an audit process, held to :data:`AUDIT_GOAL`."""
    return against_imports(
        case,
        audit,
        imports,
        ratio_label=ratio_label,
        goal=f"<= {AUDIT_GOAL:g}x imports",
        met=audit / imports <= AUDIT_GOAL,
        repeats=repeats,
        note=note,
    )


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
