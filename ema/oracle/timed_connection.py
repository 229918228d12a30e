"""One kept-alive HTTP(S) connection whose every request has a wall-clock limit, however slowly bytes arrive.

A socket timeout bounds each receive, not the whole reply: a server that trickles one
byte at a time would never trip it. Here a timer shuts the socket down when a request's
time is up, which wakes any blocked connect, send or receive. No proxy is used.
"""

from __future__ import annotations

import http.client
import select
import socket
import threading
from collections.abc import Mapping


class RequestExpired(Exception):
    """A request's wall-clock limit ran out (internal to the oracle package: the caller retries or gives up)."""


class TimedConnection:
    """A kept-alive connection to ``host:port``, reopened when the server has closed it.

    Parameters
    ----------
    scheme : {"http", "https"}
    host : str
    port : int or None
        None for the scheme's default port.
    """

    def __init__(self, scheme: str, host: str, port: int | None) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self._connection: http.client.HTTPConnection | None = None

    def post(
        self, path: str, body: bytes, headers: Mapping[str, str], *, seconds: float, most: int
    ) -> tuple[int, bytes]:
        """One POST of ``body`` with ``headers`` (its Content-Type, any authorization) within ``seconds`` of wall
        time: (status, reply of at most ``most`` + 1 bytes).

        A reply longer than ``most`` bytes is cut at ``most`` + 1, for the caller to refuse.

        Raises
        ------
        RequestExpired
            When the time is up (whatever was read may be cut short), or a socket timed out.
        OSError, http.client.HTTPException
            When the connection fails otherwise, or the server closed it before the reply's end.
        """
        connection = self._connect(seconds)
        timer, expired = _start_expiry(connection, seconds)
        try:
            if connection.sock is None:
                connection.connect()
            if not expired.is_set():
                connection.request("POST", path, body=body, headers=dict(headers))
                response = connection.getresponse()
                reply = _read_at_most(response, most)
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            if expired.is_set() or isinstance(exc, TimeoutError):  # a socket timeout is the same limit, per receive
                raise RequestExpired from None
            raise
        finally:
            timer.cancel()
        if expired.is_set():  # the socket was shut down: whatever was read may be cut short
            self.close()
            raise RequestExpired
        self._settle(response, reply, most)
        return response.status, bytes(reply)

    def _settle(self, response: http.client.HTTPResponse, reply: bytearray, most: int) -> None:
        """Refuse a reply cut short by the server's close; keep the connection only when the server keeps it."""
        if len(reply) <= most and response.length:
            self.close()
            raise http.client.IncompleteRead(bytes(reply), response.length)  # the server closed before the end
        if response.will_close or not response.isclosed():
            self.close()

    def _connect(self, seconds: float) -> http.client.HTTPConnection:
        """The kept-alive connection, unless the server has closed it; socket timeouts set to ``seconds``."""
        connection = self._connection
        if connection is not None and connection.sock is not None:
            if select.select([connection.sock], [], [], 0)[0]:  # readable while idle: closed by the server
                self.close()
                connection = None
            else:
                connection.sock.settimeout(seconds)
        if connection is None:
            connection = self._open(seconds)
            self._connection = connection
        connection.timeout = seconds
        return connection

    def _open(self, seconds: float) -> http.client.HTTPConnection:
        """A new (not yet connected) connection with socket timeouts of ``seconds``."""
        if self.scheme == "https":
            import ssl

            return http.client.HTTPSConnection(
                self.host, self.port, timeout=seconds, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=seconds)

    def close(self) -> None:
        """Close the connection; the next request opens a new one."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def _start_expiry(connection: http.client.HTTPConnection, seconds: float) -> tuple[threading.Timer, threading.Event]:
    """A started timer that, after ``seconds``, sets the returned event and shuts the connection's socket down."""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        sock = connection.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer, expired


def _read_at_most(response: http.client.HTTPResponse, most: int) -> bytearray:
    """The reply to its end (its length, last chunk or the server's close), stopping past ``most`` bytes."""
    reply = bytearray()
    while len(reply) <= most:
        chunk = response.read(min(most + 1 - len(reply), 1 << 20))
        if not chunk:
            break
        reply += chunk
    return reply
