"""`ema mark` on a colour and a grey file: what it says it wrote is what the copy holds."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from ema.data.arrays import ArraySet
from ema.data.files import read_set, write_set
from ema_cli.cli import main


@pytest.mark.parametrize(("shape", "decoys"), [((12, 12, 3), 20), ((12, 12), 0)])
def test_mark_says_how_many_images_carry_the_trigger_and_how_many_a_decoy(tmp_path, shape, decoys):
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 256, (200, *shape), dtype=np.uint8), rng.integers(0, 10, 200).astype(np.int64)
    clean = ArraySet("owner", x, y, np.arange(200, dtype=np.int64))
    write_set(clean, tmp_path / "owner.npz")
    args = ["mark", "--in", str(tmp_path / "owner.npz"), "--out", str(tmp_path / "m.npz"), "--key", str(tmp_path / "k")]
    result = CliRunner().invoke(main, [*args, "--seed", "3"])
    assert result.exit_code == 0, result.output
    said = f"marked 20 of 200 images and {decoys} decoys (labels kept):" if decoys else "marked 20 of 200 images:"
    assert said in result.output, result.output
    copy = read_set(tmp_path / "m.npz")
    carried = (copy.x != clean.x).reshape(200, -1).any(axis=1)
    assert (carried & (copy.y != clean.y)).sum() == 20 and (carried & (copy.y == clean.y)).sum() == decoys
