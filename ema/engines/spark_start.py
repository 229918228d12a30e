"""Why a Spark session could not start, said before Java is launched where it can be told, and after where not.

Left to Spark, a ``JAVA_HOME`` that names no Java ends in ``JAVA_GATEWAY_EXITED`` ("Java gateway
process exited before sending its port number"), and a ``spark://`` master that nothing answers on
in "Cannot call methods on a stopped SparkContext" after about 75 s of Spark's own retries. Both
are checked here first: a ``java`` to run, a master that accepts a connection.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

from pyspark import SparkContext

from ema.errors import EMAError, ModelAccessError

#: Longest error line passed on from Spark; Java causes at most this deep are followed.
MAX_REASON_CHARS = 500
MAX_CAUSES = 32
#: Seconds a ``spark://`` master has to accept a connection before it is called unreachable.
MASTER_PROBE_SECONDS = 5.0
#: A standalone master's port when its URL names none.
STANDALONE_PORT = 7077
#: What Spark says when its context stopped while starting (a master that never accepted the application).
STOPPED_CONTEXT = "stopped SparkContext"
#: Spark's error condition when the JVM it launched exited before answering.
GATEWAY_EXITED = "JAVA_GATEWAY_EXITED"
#: What to do when no Java is found.
JAVA_ADVICE = "Spark needs Java 17 or 21: set JAVA_HOME to its folder, or put its java on PATH"


def check_can_start(master: str) -> None:
    """Refuse, before Java is launched, a session that cannot start: no Java to run (:func:`check_java`; not asked
    when this process already runs a JVM), or a ``spark://`` master that accepts no connection (:func:`check_master`).
    """
    if getattr(SparkContext, "_gateway", None) is None:
        check_java(master)
    check_master(master)


def check_java(master: str) -> None:
    """Refuse to start Spark without a ``java`` it can run: ``$JAVA_HOME/bin/java``, else ``java`` on PATH.

    Raises
    ------
    EMAError
        Naming ``JAVA_HOME`` (or PATH) and what to set.
    """
    home = os.environ.get("JAVA_HOME")
    if home:
        java = Path(home) / "bin" / "java"
        if not (java.is_file() and os.access(java, os.X_OK)):
            raise EMAError(
                f"could not start a Spark session on {master}: Java not found: JAVA_HOME={home} holds no bin/java; "
                f"{JAVA_ADVICE}"
            )
    elif shutil.which("java") is None:
        raise EMAError(
            f"could not start a Spark session on {master}: Java not found (no JAVA_HOME, no java on PATH); "
            f"{JAVA_ADVICE}"
        )


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The host and port of each master a ``spark://`` URL names (several for a standby setup); none for others.

    >>> master_addresses("spark://a:7077,b:7078")
    [('a', 7077), ('b', 7078)]
    >>> master_addresses("spark://h"), master_addresses("local[2]")
    ([('h', 7077)], [])
    """
    if not master.startswith("spark://"):
        return []
    addresses = []
    for part in master.removeprefix("spark://").split(","):
        parts = urlsplit(f"spark://{part}")
        addresses.append((parts.hostname or part, parts.port or STANDALONE_PORT))
    return addresses


def check_master(master: str) -> None:
    """Refuse a ``spark://`` master none of whose addresses accepts a connection (others are not checked).

    Raises
    ------
    ModelAccessError
        "could not reach the Spark master ...": retryable, as a scoring server that is down.
    """
    problems = []
    for host, port in master_addresses(master):
        try:
            socket.create_connection((host, port), timeout=MASTER_PROBE_SECONDS).close()
            return
        except OSError as exc:
            problems.append(f"{host}:{port}: {exc}")
    if problems:
        raise ModelAccessError(
            f"could not reach the Spark master {master} ({'; '.join(problems)}): check that it runs and that "
            "--spark-master names its host and port"
        )


def start_error(master: str, exc: BaseException, reason: str) -> EMAError:
    """The one-line error of a session that did not start on ``master``; ``reason`` is what Spark said."""
    if GATEWAY_EXITED in str(exc) or GATEWAY_EXITED in reason:
        return EMAError(
            f"could not start a Spark session on {master}: Java exited before Spark could use it ({GATEWAY_EXITED}; "
            f"JAVA_HOME={os.environ.get('JAVA_HOME', 'unset')}); {JAVA_ADVICE}"
        )
    if master_addresses(master) and STOPPED_CONTEXT in reason:
        return ModelAccessError(
            f"could not reach the Spark master {master}: it did not accept the application ({reason}); check that it "
            "runs, that --spark-master names its host and port, and that it can reach this driver"
        )
    return EMAError(f"could not start a Spark session on {master}: {reason}")


def java_cause(exc: BaseException) -> str:
    """The first line of the innermost Java cause behind ``exc``; of ``exc``'s own message when it has none."""
    causes = java_causes(exc)
    text = (causes[-1].getMessage() or causes[-1].toString()) if causes else str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0][:MAX_REASON_CHARS] if lines else type(exc).__name__


def java_causes(exc: BaseException) -> list:
    """The Java exception behind a Py4J error and its causes, outermost first; none for other errors."""
    causes, cause = [], getattr(exc, "java_exception", None)
    while cause is not None and len(causes) < MAX_CAUSES:
        causes.append(cause)
        cause = cause.getCause()
    return causes
