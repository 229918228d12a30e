"""How the workbench's sqlite stores reach the disk: a write-ahead log, synced at checkpoints.

MLflow leaves sqlite at its defaults, a rollback journal with ``synchronous=FULL``: each commit
syncs the disk four times, and a cached audit makes ten commits (its run, params, metrics, tags,
dataset and the version's trail). On a disk whose syncs take 20 ms longer that is 0.8 s of waiting,
and the audit took 1.46x the import line, against 1.18x in WAL mode in the same rounds (README,
"Performance"). So a store the workbench creates is in WAL mode, and the connections
this process opens to it use ``synchronous=NORMAL``, sqlite's setting for WAL: a commit appends to
the log without a sync, and the log is synced into the database at checkpoints (every 1,000 pages,
and when the last connection closes, which :func:`close_stores` does when the process exits).

What that trades, in sqlite's words: the database stays consistent through a crash or a power
cut, and a crash of the process loses nothing committed; a power cut may undo the commits made
since the last checkpoint. A store that already exists keeps its journal mode (it is the user's
file: ``PRAGMA journal_mode=WAL`` converts one, README "MLflow"), and so does a store on a network
file system, which cannot give the processes that share a WAL database its shared memory.
"""

from __future__ import annotations

import atexit
import re
import sqlite3
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

#: File system types (``/proc/self/mounts``) that keep a file on another machine.
NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "gpfs", "lustre", "beegfs"}
    | {f"fuse.{name}" for name in ("sshfs", "s3fs", "gcsfuse", "rclone", "glusterfs", "ceph-fuse", "juicefs")}
)
MOUNTS = Path("/proc/self/mounts")

#: The stores whose connections sync at checkpoints, and the engines that opened them.
_STORES: set[str] = set()
_ENGINES: set[Engine] = set()


def filesystem_type(path: Path, mounts: Path | None = None) -> str | None:
    """The type of the file system ``path`` is on: that of the longest mount point above it in ``mounts``
    (default :data:`MOUNTS`); None where the mount table cannot be read (not Linux).

    >>> import tempfile; filesystem_type(Path("/x"), Path(tempfile.gettempdir()) / "no-such-mounts") is None
    True
    """
    try:
        table = (mounts or MOUNTS).read_text()
    except OSError:
        return None
    target = str(path.resolve())
    best, kind = "", None
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal.group(1), 8)), fields[1])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def on_network_filesystem(path: Path) -> bool:
    """Whether ``path`` is on a file system of :data:`NETWORK_FILESYSTEMS`."""
    return filesystem_type(path) in NETWORK_FILESYSTEMS


def create_in_wal_mode(db: Path) -> bool:
    """Create the empty database ``db`` in WAL mode, before MLflow creates its tables in it; False (nothing
    created) on a network file system, where MLflow creates it with sqlite's rollback journal."""
    if on_network_filesystem(db.parent):
        return False
    connection = sqlite3.connect(db)
    try:
        return connection.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    finally:
        connection.close()


def is_wal(db: Path) -> bool:
    """Whether the sqlite database ``db`` is in WAL mode, read from its header (no connection, which would need
    to create ``<db>-shm`` to read a WAL database); False for a file this process cannot read."""
    try:
        with db.open("rb") as file:
            header = file.read(20)
    except OSError:
        return False
    return header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"


def sync_at_checkpoints(db: Path) -> None:
    """Have this process's connections to ``db`` use ``synchronous=NORMAL`` when it is in WAL mode, and close
    them when the process exits (so that the log is checkpointed into the database and removed)."""
    if not _STORES:
        event.listen(Engine, "connect", _relax)
        event.listen(Engine, "engine_connect", _remember)
        atexit.register(close_stores)
    _STORES.add(str(db.resolve()))


def close_stores() -> None:
    """Close the pooled connections of every engine that opened a store of :func:`sync_at_checkpoints`."""
    while _ENGINES:
        _ENGINES.pop().dispose()


def _main_file(dbapi_connection: sqlite3.Connection) -> str | None:
    """The resolved path of the connection's database file, as :func:`sync_at_checkpoints` records stores; None
    for an in-memory database."""
    path = next(row[2] for row in dbapi_connection.execute("PRAGMA database_list") if row[1] == "main")
    return str(Path(path).resolve()) if path else None


def _relax(dbapi_connection: object, _record: object) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection) or _main_file(dbapi_connection) not in _STORES:
        return
    if dbapi_connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def _remember(connection: Connection) -> None:
    engine = connection.engine
    if engine not in _ENGINES and engine.dialect.name == "sqlite" and _database_of(engine) in _STORES:
        _ENGINES.add(engine)


def _database_of(engine: Engine) -> str | None:
    database = engine.url.database
    return str(Path(database).resolve()) if database and database != ":memory:" else None
