"""How many images a set read from a user may hold: checked from a file's header or metadata, before reading it.

Query, reference, member, retain and forget sets come from whoever wrote them. A small file
can declare millions of images (an ``.npz`` of zeros deflates about 1000-fold), and an audit
holds every image several times over (the pixels as floats, the model's outputs, the
membership table), so the count is bounded before any of it is read: ``--max-query`` (the
evaluator's ``max_query``) raises the bound for a machine that can hold more.
"""

from __future__ import annotations

from ema.errors import InputError

#: Bytes an in-process audit holds per query image at its peak, above the process's own ~1 GB. Measured with
#: ``/usr/bin/time -v ema audit --query-file Q --method both`` (the heaviest method: it trains a model on the
#: query): 1.79 GB for 200,000 28 x 28 images, 4.97 GB for 1,000,000, so about 4 KB an image.
AUDIT_BYTES_PER_IMAGE = 4_000
#: Images a set may hold unless ``--max-query`` says more. An audit of 1,000,000 peaks near 5 GB: a fifth
#: of the 24 GB machine the workbench is sized for, leaving room for reference sets of the same size and
#: for other processes. It took 6 minutes there; the issue's 2,000,000-image zip bomb is over it.
DEFAULT_MAX_QUERY = 1_000_000


def check_set_size(n_images: int, *, limit: int, where: str, unit: str = "images") -> None:
    """Refuse a set of ``n_images`` (as its header or metadata declares) above ``limit``, in one line.

    ``unit`` names what is counted (``rows`` for a table).

    Raises
    ------
    InputError
        Naming the count, the limit, about how much memory an audit of the set needs, and the option.
    """
    if n_images > limit:
        needed = n_images * AUDIT_BYTES_PER_IMAGE / 1e9
        raise InputError(
            f"{where}: expected at most {limit:,} {unit}, got {n_images:,} (an audit of them needs about "
            f"{needed:.2g} GB beyond the process's own); pass --max-query {n_images} (evaluator config: "
            "max_query) if this machine holds that"
        )
