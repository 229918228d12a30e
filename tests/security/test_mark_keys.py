"""Hostile mark keys and marked files: one error line, a FAILED run, nothing registered; the key never leaks.

The store holds a target trained on a marked copy of M1 (``ema mark`` then ``train_target``
with ``folds``). Each bad input goes through the ``ema`` command.
"""

from __future__ import annotations

import json
import os
import re
import stat

import numpy as np
import pytest
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from ema.data.arrays import ArraySet
from ema.data.files import read_set, write_set
from ema.data.marks import mark_set, read_key, write_key
from ema.training.spec import TrainSpec
from ema.workflows.train import train_target
from ema_cli.cli import main
from tests.security.test_cli_matrix import all_runs, registry_state
from tests.workflows.conftest import MARK_SEED, marked  # noqa: F401 - the module's store with a marked target

AUDIT = ["audit", "--method", "marks", "--query", "M6", "--no-progress"]


def refused(args: list[str], message: str) -> None:
    """``ema ARGS`` fails with one ``Error:`` line matching ``message``; its runs FAILED, the registry as before."""
    client = MlflowClient()
    registry, runs = registry_state(client), all_runs(client)
    result = CliRunner().invoke(main, args)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code != 0 and len(errors) == 1 and "Traceback" not in result.output, result.output
    assert re.search(message, errors[0]), errors[0]
    assert registry_state(client) == registry
    new = [run for run_id, run in all_runs(client).items() if run_id not in runs]
    assert all(run.info.status == "FAILED" for run in new), [run.info.status for run in new]


def bad_keys(folder, key_path) -> dict[str, tuple[str, str]]:
    """Each hostile key file, written under ``folder``, with the message its audit must fail with."""
    fields = json.loads(key_path.read_text())
    cases = {
        "not json": ("{not json", "expected a mark key written by `ema mark --key`"),
        "a list": ("[1, 2]", "expected a mark key"),
        "unknown format": (json.dumps({**fields, "format": "other/9"}), "expected a mark key"),
        "pattern off the image": (json.dumps({**fields, "position": [27, 27]}), "leaves images"),
        "negative level": (json.dumps({**fields, "pattern": [[-1]]}), "expected a mark key"),
        "huge": ("[" + "0," * (1 << 20) + "0]", "more than a key's"),
    }
    written = {}
    for name, (text, message) in cases.items():
        path = folder / f"{name.replace(' ', '-')}.json"
        path.write_text(text)
        written[name] = (str(path), message)
    return written


@pytest.mark.parametrize(
    "case", ["not json", "a list", "unknown format", "pattern off the image", "negative level", "huge"]
)
def test_a_key_that_does_not_parse_fails_the_audit_in_one_line(marked, tmp_path, case):  # noqa: F811
    path, message = bad_keys(tmp_path, marked["key"])[case]
    refused([*AUDIT, "--mark-key", path], message)


def test_a_key_for_another_image_size_fails_the_audit(marked, tmp_path):  # noqa: F811
    images = np.zeros((20, 32, 32), np.uint8)
    _, key = mark_set(ArraySet("big", images, np.arange(20) % 2, np.arange(20)), seed=1)
    path = write_key(key, tmp_path / "key32.json")
    refused([*AUDIT, "--mark-key", str(path)], r"expected query images of shape 32x32 .* got image 28x28")


def test_a_model_trained_on_an_altered_marked_file_fails_the_audit(marked, tmp_path):  # noqa: F811
    copy = read_set(marked["marked"])
    x = copy.x.copy()
    x[:, 10:18, 10:18] //= 2  # whoever trained dimmed the middle of every image
    altered = write_set(ArraySet("M1", x, copy.y, copy.index), tmp_path / "altered.npz")
    version = train_target(TrainSpec(epochs=1, hidden=(16,)), alias="altered", folds={"M1": altered}, progress=False)
    model = f"models:/{version.version.name}@altered"
    refused([*AUDIT, "--model", model, "--mark-key", str(marked["key"])], "the marked images or labels were altered")


def test_the_key_never_reaches_the_store_or_the_screen(marked):  # noqa: F811
    result = CliRunner().invoke(main, [*AUDIT, "--mark-key", str(marked["key"])])
    assert result.exit_code == 0, result.output
    key = read_key(marked["key"])
    secrets = [str(MARK_SEED), json.dumps(key.pattern.tolist()), f'"position": {list(key.position)}']
    stored = b"".join(
        path.read_bytes() for path in marked["root"].rglob("*") if path.is_file() and "mlruns" in path.parts
    )
    stored += (marked["root"] / "mlflow.db").read_bytes()
    for secret in secrets:
        assert secret.encode() not in stored and secret not in result.output, secret
    assert str(MARK_SEED) not in read_set(marked["marked"]).name


def test_the_key_file_is_its_owners_alone_and_never_overwritten(marked, tmp_path):  # noqa: F811
    assert stat.S_IMODE(os.stat(marked["key"]).st_mode) == 0o600
    before = marked["key"].read_bytes()
    args = ["mark", "--in", str(marked["clean"]), "--out", str(tmp_path / "again.npz"), "--key", str(marked["key"])]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0 and "expected a new key file" in result.output, result.output
    assert marked["key"].read_bytes() == before and not (tmp_path / "again.npz").exists()


def test_mark_refuses_a_table_with_the_reason(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text("a,b,label\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(20)))
    args = ["mark", "--in", str(table), "--out", str(tmp_path / "m.npz"), "--key", str(tmp_path / "k.json")]
    result = CliRunner().invoke(main, args)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exit_code != 0 and len(errors) == 1 and "tables are not marked" in errors[0], result.output
    assert not (tmp_path / "k.json").exists()
