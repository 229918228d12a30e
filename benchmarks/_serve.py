"""A real ``mlflow models serve`` process for one model: started, polled, always stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from benchmarks._common import progress

#: Seconds to wait for GET /ping to answer 200.
START_TIMEOUT = 180.0
#: Seconds to wait for the server to exit after SIGTERM before escalating.
STOP_TIMEOUT = 20.0


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(endpoint: str) -> bool:
    """Whether GET ``endpoint`` (a server's ``/ping`` or ``/health``) answers 200 now."""
    try:
        with urllib.request.urlopen(endpoint, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def stop(process: subprocess.Popen) -> None:
    """SIGTERM the server (it stops its uvicorn child); escalate to its own process group if needed."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT)
    # The server was started in a session of its own: reap any child it left in that group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)


@contextlib.contextmanager
def serve(model_uri: str, *, threads: int, workers: int = 1) -> Iterator[tuple[str, float]]:
    """Run ``mlflow models serve -m URI --env-manager local --workers N`` on a free port.

    Yields
    ------
    (base URL, seconds until GET /ping answered)

    The process gets the current ``MLFLOW_TRACKING_URI`` and ``OMP_NUM_THREADS=threads``;
    the Python environment's ``bin`` goes first on PATH (the server starts uvicorn through
    bash). It is stopped with SIGTERM on exit, whatever happened.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    command = [
        sys.executable, "-m", "mlflow", "models", "serve",
        "-m", model_uri, "-p", str(port), "--host", "127.0.0.1", "--env-manager", "local", "--workers", str(workers),
    ]  # fmt: skip
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            start = time.perf_counter()
            while not answers(f"{url}/ping"):
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"`{' '.join(command)}` exited with {process.returncode}:\n{log.read()[-3000:]}")
                if time.perf_counter() - start > START_TIMEOUT:
                    log.seek(0)
                    raise RuntimeError(
                        f"server for {model_uri} did not answer /ping in {START_TIMEOUT:.0f} s:\n{log.read()[-3000:]}"
                    )
                time.sleep(0.25)
            startup = time.perf_counter() - start
            progress(f"server for {model_uri} up on {url} after {startup:.1f} s (pid {process.pid})")
            yield url, startup
        finally:
            stop(process)
            progress(f"server pid {process.pid} stopped (exit code {process.returncode})")
