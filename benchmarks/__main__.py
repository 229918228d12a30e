"""``python -m benchmarks [--quick] [--only NAME[,NAME]]``: run, print the table, write RESULTS.md.

A run in which every measurement was skipped or failed writes nothing: the results recorded in
``--output`` stay as they are.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import time
import traceback
from pathlib import Path

from benchmarks import MEASUREMENTS
from benchmarks._common import DEFAULT_THREADS, Config, Skipped, machine_info, progress, quiet_mlflow, set_threads

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
TABLE_COLUMNS = ("benchmark", "case", "ours", "baseline", "ratio", "goal", "status")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="Fewer repeats, epochs and HTTP images: a fast pass.")
    parser.add_argument(
        "--only",
        default=",".join(MEASUREMENTS),
        help=f"Comma-separated measurements to run, from {', '.join(MEASUREMENTS)} (default: all).",
    )
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS, help="torch.set_num_threads (default: 2).")
    parser.add_argument(
        "--omp-wait-policy",
        choices=("passive", "active", "inherit"),
        default="passive",
        help=(
            "OMP_WAIT_POLICY for torch's OpenMP threads, set before torch is imported (default: passive). "
            "With active spinning, two threads on a shared two-core machine slow small-batch work by up to 10x "
            "and make repeats scatter; 'inherit' leaves the environment as it is."
        ),
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="Repeats of cheap measurements (default: 5; 3 with --quick)."
    )
    parser.add_argument("--no-profile", action="store_true", help="Skip the pyinstrument profiles.")
    parser.add_argument(
        "--output", type=Path, default=RESULTS, help=f"Where to write the results (default: {RESULTS})."
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in MEASUREMENTS]
    if unknown or not chosen:
        parser.error(f"expected --only names from {', '.join(MEASUREMENTS)}, got {args.only!r}")
    args.only = [name for name in MEASUREMENTS if name in chosen]
    return args


def fmt_value(value: float | None, unit: str, approximate: bool = False) -> str:
    """A figure with its unit, to about three significant digits."""
    if value is None:
        return "-"
    prefix = "~" if approximate else ""
    if unit == "s":
        text = f"{value:.3g} s" if value < 100 else f"{value:,.0f} s"
    elif unit.startswith("MB"):
        text = f"{value:,.0f} MB"
    else:
        text = f"{value:,.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return prefix + text


def fmt_ratio(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.3g}x"


def status(row: dict) -> str:
    if row.get("error"):
        return "ERROR"
    if row.get("skipped"):
        return "skipped"
    return {True: "met", False: "MISSED", None: "-"}[row["met"]]


def cells(row: dict) -> dict[str, str]:
    if row.get("error") or row.get("skipped"):
        return {
            "benchmark": row["benchmark"],
            "case": "failed" if row.get("error") else row["skipped"],
            "ours": "-",
            "baseline": "-",
            "ratio": "-",
            "goal": "-",
            "status": status(row),
        }
    return {
        "benchmark": row["benchmark"],
        "case": row["case"],
        "ours": fmt_value(row["ours"], row["unit"]),
        "baseline": fmt_value(row["baseline"], row["unit"], row.get("baseline_extrapolated", False)),
        "ratio": f"{fmt_ratio(row['ratio'])} ({row['ratio_label']})",
        "goal": row["goal"] or "-",
        "status": status(row),
    }


def text_table(rows: list[dict]) -> str:
    """A fixed-width table for the terminal, then the notes, numbered."""
    table = [cells(r) for r in rows]
    widths = {c: max(len(c), *(len(t[c]) for t in table)) for c in TABLE_COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in TABLE_COLUMNS), "  ".join("-" * widths[c] for c in TABLE_COLUMNS)]
    lines += ["  ".join(t[c].ljust(widths[c]) for c in TABLE_COLUMNS) for t in table]
    lines.append("")
    for i, r in enumerate(rows, start=1):
        note = r.get("error") or r.get("skipped") or f"baseline: {r['baseline_label']}; {r['note']}"
        lines.append(f"[{i}] {r['benchmark']} / {r.get('case', '')}: {note}")
    return "\n".join(lines)


def md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[dict], info: dict[str, str], args: argparse.Namespace, elapsed: dict[str, float]) -> str:
    """RESULTS.md: machine, summary of goals, then each measurement with its notes and details."""
    command = "python -m benchmarks" + (" --quick" if args.quick else "")
    if args.only != list(MEASUREMENTS):
        command += f" --only {','.join(args.only)}"
    if args.threads != DEFAULT_THREADS:
        command += f" --threads {args.threads}"
    if args.omp_wait_policy != "passive":
        command += f" --omp-wait-policy {args.omp_wait_policy}"
    out = [
        "# Benchmark results",
        "",
        f"Written by `{command}` on {info['date']}. Do not edit by hand: rerun the command.",
        "Every figure is a median over the repeats shown, and every ratio is against a baseline measured",
        "in the same run (the machine is shared, so absolute timings are noisy; ratios are what to compare).",
        "",
        "## Machine",
        "",
        *(f"- {key}: {value}" for key, value in info.items()),
        f"- mode: {'--quick' if args.quick else 'full'}; measurements: {', '.join(args.only)}",
        f"- wall time per measurement: {', '.join(f'{k} {v:.0f} s' for k, v in elapsed.items())}",
        "",
        "## Summary",
        "",
        "| " + " | ".join(TABLE_COLUMNS) + " |",
        "|" + "---|" * len(TABLE_COLUMNS),
    ]
    out += ["| " + " | ".join(md_escape(cells(r)[c]) for c in TABLE_COLUMNS) + " |" for r in rows]
    for name in args.only:
        module = importlib.import_module(f"benchmarks.{name}")
        mine = [r for r in rows if r["benchmark"] == name]
        doc = inspect.getdoc(module) or ""
        out += ["", f"## {name}", "", doc, ""]
        out += [
            "| case | ours | baseline | ratio | goal | status | repeats | notes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in mine:
            c = cells(r)
            if r.get("error"):
                out.append(f"| failed | - | - | - | - | ERROR | - | {md_escape(r['error'].splitlines()[-1])} |")
                continue
            if r.get("skipped"):
                out.append(f"| {md_escape(r['skipped'])} | - | - | - | - | skipped | - | not measured here |")
                continue
            note = f"baseline: {r['baseline_label']}; {r['note']}"
            out.append(
                f"| {md_escape(c['case'])} | {c['ours']} | {c['baseline']} | {md_escape(c['ratio'])} | "
                f"{md_escape(c['goal'])} | {c['status']} | {r['repeats']} | {md_escape(note)} |"
            )
        for r in mine:
            if r.get("details"):
                out += ["", r["details"]]
            if r.get("error"):
                out += ["", "```", r["error"].rstrip(), "```"]
    out += [
        "",
        "## How to run",
        "",
        "```bash",
        "python -m benchmarks            # everything (tens of minutes on two cores)",
        "python -m benchmarks --quick    # a fast pass: fewer repeats, epochs and HTTP images",
        "python -m benchmarks --only thresholds,scoring",
        "python -m pytest tests/benchmarks -m 'slow or not slow'   # the smoke test",
        "```",
        "",
    ]
    return "\n".join(out)


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text)
    partial.replace(path)


def run(args: argparse.Namespace) -> tuple[list[dict], dict[str, float]]:
    config = Config(quick=args.quick, threads=args.threads, repeats=args.repeats)
    rows: list[dict] = []
    elapsed: dict[str, float] = {}
    for name in args.only:
        module = importlib.import_module(f"benchmarks.{name}")
        progress(f"== {name} ==")
        start = time.perf_counter()
        kwargs = (
            {"profile": False} if args.no_profile and "profile" in inspect.signature(module.measure).parameters else {}
        )
        try:
            rows += module.measure(config, **kwargs)
        except Skipped as reason:  # an extra or a device this machine lacks: said in its row, the others still run
            progress(f"{name} skipped: {reason}")
            rows.append({"benchmark": name, "skipped": str(reason)})
        except Exception:  # one failed measurement must not lose the others' results
            error = traceback.format_exc()
            progress(f"{name} FAILED:\n{error}")
            rows.append({"benchmark": name, "error": error})
        elapsed[name] = time.perf_counter() - start
        progress(f"== {name} done in {elapsed[name]:.0f} s ==")
    return rows, elapsed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.omp_wait_policy != "inherit":
        if "torch" in sys.modules:
            progress("warning: torch is already imported; OMP_WAIT_POLICY may not take effect")
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy.upper()
    quiet_mlflow()
    set_threads(args.threads)
    info = machine_info(args.threads)
    rows, elapsed = run(args)
    info["load average at end (1, 5, 15 min)"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(text_table(rows))
    if any(not (r.get("skipped") or r.get("error")) for r in rows):
        write_atomically(args.output, markdown(rows, info, args, elapsed))
        progress(f"results written to {args.output}")
    else:  # e.g. benchmarks.gpu without CUDA: the recorded results stay as they are
        progress(f"nothing was measured: {args.output} left as it is")
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
