"""Profile one call with pyinstrument and say, in Markdown, where its time goes."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from benchmarks._common import progress

#: Sampling interval of the profiler, in seconds.
INTERVAL = 0.001
#: Rows in each summary table.
TOP = 12
#: Where the full text profiles go.
PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
#: Where our library's source lives (the benchmark harness itself is left out of the tables).
OURS = "/ema/"


def _package(path: str) -> str:
    """Which package a source file belongs to: ema, torch, mlflow, ..., or the standard library."""
    path = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1].split("/", 1)[0].removesuffix(".py")
    if "/ema/" in path:
        return "ema"
    if "/benchmarks/" in path:
        return "benchmarks"
    if path.startswith("<"):
        return "builtins / C"
    return "python stdlib"


def _is_ours(path: str) -> bool:
    path = path.replace("\\", "/")
    return OURS in path and "-packages/" not in path


def _name(frame) -> str:
    path = frame.file_path or ""
    short = path.replace("\\", "/")
    for marker in ("site-packages/", "/work/main/"):
        if marker in short:
            short = short.split(marker, 1)[1]
    return f"`{frame.function}` ({short}:{frame.line_no})"


def summarize(root, total: float) -> str:
    """Markdown: self time by package, our calls into libraries, and top functions by self time."""
    by_package: dict[str, float] = defaultdict(float)
    self_time: dict[str, float] = defaultdict(float)
    boundary: dict[str, float] = defaultdict(float)
    ours_inclusive: dict[str, float] = defaultdict(float)

    def walk(frame, stack: tuple[str, ...], caller_is_ours: bool, caller: str) -> None:
        children = list(frame.children)
        real = [c for c in children if not c.is_synthetic]
        own = frame.time - sum(c.time for c in real)
        key = _name(frame)
        path = frame.file_path or ""
        by_package[_package(path)] += own
        self_time[key] += own
        ours = _is_ours(path)
        # Context-manager plumbing between our code and the library it enters is not a destination.
        transparent = caller_is_ours and path.replace("\\", "/").endswith("/contextlib.py")
        if key not in stack and not transparent:
            if ours:
                ours_inclusive[key] += frame.time
            elif caller_is_ours:
                boundary[f"{caller} -> {key}"] += frame.time
        for child in real:
            if transparent:
                walk(child, (*stack, key), True, caller)
            else:
                walk(child, (*stack, key), ours, key if ours else caller)

    for child in [root] if not root.is_synthetic else root.children:
        walk(child, (), False, "")

    def table(title: str, items: dict[str, float], top: int = TOP) -> str:
        lines = [f"**{title}**", "", "| seconds | share | where |", "|---:|---:|---|"]
        for name, seconds in sorted(items.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"| {seconds:.2f} | {seconds / total:.0%} | {name} |")
        return "\n".join(lines)

    return "\n\n".join(
        [
            table("Self time by package", by_package, top=10),
            table("Our code's calls into libraries (inclusive time, top entries)", boundary),
            table("Our functions (inclusive time)", ours_inclusive),
            table("Functions by self time", self_time),
        ]
    )


def profile_call(name: str, fn: Callable[[], object]) -> tuple[str, object]:
    """Run ``fn`` under pyinstrument; write the full text profile; return a Markdown summary and fn's value.

    Returns ``("", value)`` if pyinstrument is not installed (``pip install pyinstrument``).
    """
    try:
        from pyinstrument import Profiler
    except ImportError:
        progress("pyinstrument is not installed: no profile (pip install pyinstrument)")
        return "_(not profiled: pyinstrument is not installed; `pip install pyinstrument`)_", fn()
    profiler = Profiler(interval=INTERVAL)
    profiler.start()
    try:
        value = fn()
    finally:
        profiler.stop()
    session = profiler.last_session
    total = session.duration
    root = session.root_frame()
    summary = summarize(root, total) if root is not None else "_(empty profile)_"
    PROFILE_DIR.mkdir(exist_ok=True)
    path = PROFILE_DIR / f"{name}.txt"
    partial = path.with_name(path.name + ".partial")
    partial.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    partial.replace(path)
    progress(f"profile of {name} ({total:.1f} s) written to {path}")
    relative = path.relative_to(Path(__file__).resolve().parent.parent)
    header = f"Profiled once with pyinstrument ({total:.1f} s under the profiler); full tree in `{relative}`."
    return header + "\n\n" + summary, value


if __name__ == "__main__":  # pragma: no cover - manual check
    print(profile_call("selftest", lambda: sum(i * i for i in range(10**6)))[0], file=sys.stderr)
