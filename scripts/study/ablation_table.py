"""docs/search.md's ablation table from an experiment's report.json: each arm against the default search, at equal
answers, paired over problems (issue 61).

Reads the report's paired differences (`evolve report FILE --pairs first`, the default search listed first, so Holm
adjusts over the comparisons with it only) and prints one markdown row per other arm: the difference default - arm
in cracked share and in mean best scalar, each with its interval, wins/losses/ties over problems and the
Holm-adjusted permutation p; `significant` marks where the default and the arm differ at the report's level.

    .venv/bin/python scripts/study/ablation_table.py REPORT_DIR/report.json [--default default]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

METRICS = {"cracked_share": "cracked share", "mean_best": "mean best scalar"}


def rows(report: dict[str, Any], default: str) -> list[str]:
    """The table's lines: a header, then one row per arm compared with `default` (the sign turned so that a
    positive difference means the default is ahead)."""
    by_arm: dict[str, dict[str, dict[str, Any]]] = {}
    for difference in report["differences"]:
        a, b = difference["policy_a"], difference["policy_b"]
        if default not in (a, b):
            continue
        arm, sign = (b, 1.0) if a == default else (a, -1.0)
        low, high = sorted((sign * difference["mean"]["low"], sign * difference["mean"]["high"]))
        by_arm.setdefault(arm, {})[difference["metric"]] = {
            "estimate": sign * difference["mean"]["estimate"], "low": low, "high": high,
            "record": f"{difference['wins']}/{difference['losses']}/{difference['ties']}" if sign > 0
            else f"{difference['losses']}/{difference['wins']}/{difference['ties']}",
            "p": difference["permutation_p_holm"], "significant": difference["significant"],
            "problems": len(difference["problems"])}
    if not by_arm:
        raise SystemExit(f"no difference with the arm {default!r} in this report (arms: "
                         f"{', '.join(report.get('policies', []))})")
    header = ["arm", "problems", *(f"{default} - arm: {label} [interval], ahead/behind/tied, Holm p"
                                   for label in METRICS.values())]
    out = ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * len(METRICS)]
    for arm, metrics in by_arm.items():
        cells = []
        for metric in METRICS:
            m = metrics.get(metric)
            cells.append("-" if m is None else f"{m['estimate']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}], "
                         f"{m['record']}, {m['p']:.3g}{' (significant)' if m['significant'] else ''}")
        problems = max(m["problems"] for m in metrics.values())
        out.append(f"| {arm} | {problems} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="an experiment report's report.json")
    parser.add_argument("--default", default="default", help="the default search's arm (default: default)")
    args = parser.parse_args()
    print("\n".join(rows(json.loads(args.report.read_text()), args.default)))


if __name__ == "__main__":
    main()
