"""``ema mark``: the data owner's side of a mark: a marked copy of their file and the secret key, before sharing.

Nothing here touches the tracking store: the key is a secret (:mod:`ema.data.marks`), and the
marked copy is the owner's own file. A model trained on it records the copy's fingerprint in its
lineage (``ema train --fold M1=FILE``), which the marks audit later checks against the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ema.data.files import read_set, write_set
from ema.data.limits import DEFAULT_MAX_QUERY
from ema.data.marks import DEFAULT_RATE, decoy_count, mark_set, write_key
from ema.data.tables import DEFAULT_LABEL_COLUMN
from ema.errors import InputError


@dataclass(frozen=True)
class MarkOutcome:
    """What ``ema mark`` wrote: the marked copy, its key, how many of how many images carry the trigger, and how
    many carry a decoy (a noise key's: :data:`~ema.data.marks.NOISE_DECOYS`)."""

    out: Path
    key: Path
    n_marked: int
    n_images: int
    fingerprint: str
    n_decoys: int = 0


def mark_file(
    in_path: str | Path,
    out_path: str | Path,
    key_path: str | Path,
    *,
    rate: float = DEFAULT_RATE,
    seed: int | None = None,
    max_images: int = DEFAULT_MAX_QUERY,
    label_column: str = DEFAULT_LABEL_COLUMN,
) -> MarkOutcome:
    """Write the marked copy of the owner's set file ``in_path`` to ``out_path`` and its key to ``key_path``.

    Neither output may exist: a key is the only way to audit the data it marked, and a marked copy
    written over another would part it from that file's key. The key is written first (mode 0600);
    if the copy cannot be written, the key is removed again.

    Raises
    ------
    InputError
        For a table, an existing output, or what :func:`~ema.data.marks.mark_set` refuses.
    """
    out_path, key_path = Path(out_path), Path(key_path)
    if out_path.suffix != ".npz":
        raise InputError(f"expected --out to name an .npz file, got {out_path}: the marked copy is written as .npz")
    if out_path.exists():
        raise InputError(f"expected a new --out file, got {out_path}, which exists: give another path")
    data = read_set(Path(in_path), role="image set file (--in)", max_images=max_images, label_column=label_column)
    marked, key = mark_set(data, rate=rate, seed=seed)
    write_key(key, key_path)
    try:
        write_set(marked, out_path, overwrite=False)
    except BaseException:
        key_path.unlink()
        raise
    return MarkOutcome(out_path, key_path, key.n_marked, len(marked), marked.fingerprint, decoy_count(key, len(marked)))
