"""Warnings logged deep below an audit reach its record: marked ones only, each once, whatever the root level;
those already on the screen are known, so that `ema audit` prints each once."""

from __future__ import annotations

import logging
import sys

from ema.run_warnings import FOR_THE_RECORD, gather_run_warnings, shown_run_warnings


def test_marked_warnings_are_gathered_once_in_order_and_unmarked_ones_not():
    logger = logging.getLogger("ema.oracle.base")
    with gather_run_warnings() as gathered:
        logger.warning("columns %s sent by position", "a, b", extra=FOR_THE_RECORD)
        logger.warning("a lease renewed late")  # operational: not for the record
        logger.warning("text column %s left out", "id", extra=FOR_THE_RECORD)
        logger.warning("columns %s sent by position", "a, b", extra=FOR_THE_RECORD)
    logger.warning("after the audit", extra=FOR_THE_RECORD)
    assert gathered == ["columns a, b sent by position", "text column id left out"]


def test_warnings_are_gathered_where_a_library_raised_the_level_and_the_level_comes_back(monkeypatch):
    """Importing ``mlflow.pytorch`` runs ``logging.basicConfig(level=ERROR)``: the root level hides warnings."""
    monkeypatch.setattr(logging.getLogger(), "level", logging.ERROR)
    ema = logging.getLogger("ema")
    monkeypatch.setattr(ema, "level", logging.NOTSET)
    with gather_run_warnings() as gathered:
        logging.getLogger("ema.data.tables").warning("kept", extra=FOR_THE_RECORD)
    assert gathered == ["kept"] and ema.level == logging.NOTSET


def test_nested_gatherers_each_keep_their_own():
    logger = logging.getLogger("ema.training.clones")
    with gather_run_warnings() as outer:
        logger.warning("outer", extra=FOR_THE_RECORD)
        with gather_run_warnings() as inner:
            logger.warning("inner", extra=FOR_THE_RECORD)
        logger.warning("outer again", extra=FOR_THE_RECORD)
    assert (outer, inner) == (["outer", "outer again"], ["inner"])


def test_where_no_logging_is_set_up_warnings_still_reach_stderr_during_and_after(monkeypatch, capsys):
    """The gathering handler would otherwise stand in for Python's last resort, which shows warnings to stderr."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    logger = logging.getLogger("ema.tracking.single_flight")
    with gather_run_warnings() as gathered:
        logger.warning("a lease renewed late")
        logger.warning("columns sent by position", extra=FOR_THE_RECORD)
    logger.warning("after the audit")
    assert capsys.readouterr().err.splitlines() == [
        "a lease renewed late",
        "columns sent by position",
        "after the audit",
    ]
    assert gathered == ["columns sent by position"] and logging.getLogger("ema").handlers == []


def test_shown_run_warnings_notes_those_on_the_screen_and_not_those_in_a_file(monkeypatch, tmp_path):
    """``ema audit`` lists an audit's warnings at its end less these: each is printed once."""
    root = logging.getLogger()
    logger = logging.getLogger("ema.data.tables")
    monkeypatch.setattr(root, "handlers", [])
    with shown_run_warnings() as shown, gather_run_warnings() as gathered:
        logger.warning("shown by the last resort", extra=FOR_THE_RECORD)
    assert shown == {"shown by the last resort"} and gathered == ["shown by the last resort"]

    console = logging.StreamHandler(sys.stderr)  # as logging.basicConfig (run by importing mlflow.pytorch) adds
    monkeypatch.setattr(root, "handlers", [console])
    with shown_run_warnings() as shown, gather_run_warnings():
        logger.warning("shown by basicConfig's handler", extra=FOR_THE_RECORD)
    assert shown == {"shown by basicConfig's handler"}

    to_file = logging.FileHandler(tmp_path / "audit.log")
    monkeypatch.setattr(root, "handlers", [to_file])
    with shown_run_warnings() as shown, gather_run_warnings() as gathered:
        logger.warning("written to a file", extra=FOR_THE_RECORD)
    to_file.close()
    assert shown == set() and gathered == ["written to a file"]
