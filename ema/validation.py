"""Checks shared by every public boundary, with one message template: "expected X, got Y".

Each check validates one argument and returns it, so callers can validate and assign in
one line. Private helpers downstream take validated values and say so.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from collections.abc import Collection
from typing import TypeVar

from ema.errors import InputError

T = TypeVar("T")
#: What replaces a secret in a URL that is recorded or shown.
REDACTED = "***"
#: The user information of a URL (``scheme://USERINFO@host``), up to its last ``@`` before the path.
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")
#: Words in a query parameter's name that say it carries a secret (``?api_key=...``, ``&X-Amz-Signature=...``).
SECRET_NAME = re.compile(r"token|key|secret|passw|pwd|sig|credential|auth", re.IGNORECASE)
_SECRET_PARAMETER = re.compile(
    rf"(?P<name>[?&;][^=&#\s]*(?:{SECRET_NAME.pattern})[^=&#\s]*)=(?P<value>[^&#\s]*)", re.IGNORECASE
)
#: Hex digits kept of a SHA-256 digest: short enough for a tag, long enough not to collide.
SHORT_HASH_LENGTH = 16


def check_choice(name: str, value: T, choices: Collection[T]) -> T:
    """``value`` if it is one of ``choices``.

    >>> check_choice("method", "ema", ("ema", "both"))
    'ema'
    """
    if value not in choices:
        raise InputError(f"expected {name} in {tuple(choices)}, got {value!r}")
    return value


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an int if it is a whole number of at least 1 (a bool is not)."""
    whole = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not whole or value != int(value) or value < 1:
        raise InputError(f"expected {name} to be a positive integer, got {value!r}")
    return int(value)


def check_open_unit(name: str, value: object) -> float:
    """``value`` as a float if it lies strictly between 0 and 1 (NaN does not)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < float(value) < 1.0:
        raise InputError(f"expected {name} in (0, 1), got {value!r}")
    return float(value)


def check_certify_level(value: object) -> float:
    """``value`` as a float if it is a one-sided level in (0.5, 1).

    The level's upper bound lies z_L standard errors above the estimate; at 0.5 or below it lies at or
    under the estimate, and certifies nothing.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.5 < float(value) < 1.0:
        raise InputError(f"expected a certify level in (0.5, 1) (a one-sided level, e.g. 0.95), got {value!r}")
    return float(value)


def check_finite(name: str, value: object, *, minimum: float | None = None, open_minimum: bool = False) -> float:
    """``value`` as a float if it is finite and at least (or, open, above) ``minimum``."""
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    below = minimum is not None and (number <= minimum if open_minimum else number < minimum)
    if not math.isfinite(number) or below:
        bound = "" if minimum is None else f" {'>' if open_minimum else '>='} {minimum:g}"
        raise InputError(f"expected {name} to be a finite number{bound}, got {value!r}")
    return number


def check_seed(name: str, value: object) -> int:
    """``value`` if it is a non-negative integer (a bool is not).

    >>> check_seed("seed", 3)
    3
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"expected {name} to be a non-negative integer, got {value!r}")
    return value


def check_momentum(name: str, value: object) -> float:
    """``value`` as a float if it lies in [0, 1), as SGD momentum must."""
    if not 0.0 <= check_finite(name, value, minimum=0.0) < 1.0:
        raise InputError(f"expected {name} in [0, 1), got {value!r}")
    return float(value)


#: Registered model names: letters, digits, ``.``, ``_``, ``-``; no path separators, quotes or spaces.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: Aliases as MLflow accepts them, minus the names it reserves (``latest``, ``v<N>``).
ALIAS = re.compile(r"(?!latest$)(?!v\d+$)[A-Za-z_][A-Za-z0-9_-]{0,127}")


def check_model_name(name: str, value: object) -> str:
    """``value`` if it can name a registered model (and sit in a ``models:/`` URI and a registry search)."""
    if not isinstance(value, str) or not MODEL_NAME.fullmatch(value) or ".." in value:
        raise InputError(
            f"expected {name} of letters, digits, '.', '_' or '-' (no '/', '..', quotes or spaces), got {value!r}"
        )
    return value


def check_alias(name: str, value: object) -> str:
    """``value`` if it can be a registered model's alias (``latest`` and ``v1``, ``v2``, ... are reserved)."""
    if not isinstance(value, str) or not ALIAS.fullmatch(value):
        raise InputError(
            f"expected {name} of letters, digits, '_' or '-', starting with a letter, not 'latest' or 'v<N>', "
            f"got {value!r}"
        )
    return value


def short_hash(payload: object) -> str:
    """A short stable hash of a JSON-ready value (keys sorted), for cache keys and configuration tags.

    >>> short_hash({"b": 1, "a": 2}) == short_hash({"a": 2, "b": 1})
    True
    """
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:SHORT_HASH_LENGTH]


def redact_url(text: str) -> str:
    """``text`` with the secrets of every URL in it replaced by ``***``: passwords, lone user names, token parameters.

    ``http://user:secret@host/x?api_key=k`` becomes ``http://user:***@host/x?api_key=***``; a
    user name without a password (``https://TOKEN@host``) is often a token and is hidden whole.
    Applied wherever a URL is recorded (params, tags, run names, reports) or shown (messages);
    the caller keeps the real URL to connect with. Works on a URL or on a message quoting URLs.

    >>> redact_url("scoring server http://me:pw@127.0.0.1:5001/invocations?token=t failed")
    'scoring server http://me:***@127.0.0.1:5001/invocations?token=*** failed'
    """
    text = _URL_USERINFO.sub(_redacted_userinfo, text)
    return _SECRET_PARAMETER.sub(rf"\g<name>={REDACTED}", text)


def _redacted_userinfo(match: re.Match) -> str:
    user, has_password, _ = match["userinfo"].partition(":")
    shown = f"{user}:{REDACTED}" if has_password else REDACTED
    return f"{match['scheme']}{shown}@"
