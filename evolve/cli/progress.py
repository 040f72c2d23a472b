"""Live progress of a run or an experiment: rich panels on a terminal, plain lines elsewhere."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from evolve.engine.controller import RunStats
from evolve.engine.experiment import CellKey, CellProgress


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def summary_rows(stats: RunStats) -> list[tuple[str, str]]:
    elapsed = time.monotonic() - stats.started_at
    tokens_per_s = stats.completion_tokens / elapsed if elapsed > 0 else 0.0
    failures = ", ".join(f"{k} {v}" for k, v in sorted(stats.outcomes.items()) if k != "child") or "none"
    best = stats.best
    best_text = f"{best.scalar:.4f} (program #{best.id}, iteration {best.iteration})" if best else "-"
    solved = stats.first_solved
    solved_text = f"yes, at iteration {solved.iteration} (program #{solved.id})" if solved else "not yet"
    return [
        ("iterations", f"{stats.iterations_done}/{stats.iterations_target}"),
        ("iterations with a valid child", _rate(stats.iterations_with_child, stats.iterations_done)),
        ("children evaluated", str(stats.children)),
        ("other outcomes", failures),
        ("best scalar", best_text),
        ("solved", solved_text),
        ("generation", f"{stats.completion_tokens} tokens, {tokens_per_s:.1f} tokens/s over {elapsed:.0f}s"),
    ]


class ProgressView:
    """Context manager that renders RunStats; call update() whenever the stats change."""

    def __init__(self, title: str, console: Console | None = None, live: bool | None = None) -> None:
        self.title = title
        self.console = console or Console()
        self.live_mode = self.console.is_terminal if live is None else live
        self._live: Live | None = None
        self._printed = 0

    def __enter__(self) -> ProgressView:
        if self.live_mode:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        else:
            self.console.print(self.title)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.__exit__(exc_type, exc, tb)

    def update(self, stats: RunStats) -> None:
        if self._live is not None:
            self._live.update(self.render(stats))
            return
        if stats.iterations_done > self._printed and stats.recent:
            self._printed = stats.iterations_done
            best = f"{stats.best.scalar:.4f}" if stats.best else "-"
            self.console.print(
                f"[{stats.iterations_done}/{stats.iterations_target}] {stats.recent[-1]}  (best {best})",
                highlight=False,
            )

    def render(self, stats: RunStats) -> Panel:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan")
        table.add_column()
        for key, value in summary_rows(stats):
            table.add_row(key, value)
        bar = ProgressBar(total=stats.iterations_target, completed=stats.iterations_done, width=60)
        recent = Text("\n".join(stats.recent) or "waiting for the first completion...", style="dim")
        return Panel(Group(bar, table, Text(""), recent), title=self.title, border_style="green")


class ExperimentView:
    """Live table of an experiment's cells on a terminal; elsewhere one line per cell event and per iteration."""

    def __init__(self, title: str, cells: list[CellProgress], console: Console | None = None,
                 live: bool | None = None) -> None:
        self.title = title
        self.cells = cells
        self.console = console or Console()
        self.live_mode = self.console.is_terminal if live is None else live
        self._live: Live | None = None
        self._shown: dict[CellKey, tuple[str, int]] = {}

    def __enter__(self) -> ExperimentView:
        if self.live_mode:
            self._live = Live(self.render(), console=self.console, refresh_per_second=2, transient=False)
            self._live.__enter__()
        else:
            self.console.print(self.title, highlight=False)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.update(self.render())
            self._live.__exit__(exc_type, exc, tb)

    def update(self, cell: CellProgress) -> None:
        if self._live is not None:
            self._live.update(self.render())
            return
        done = cell.stats.iterations_done if cell.stats else 0
        if self._shown.get(cell.key) == (cell.status, done):
            return
        self._shown[cell.key] = (cell.status, done)
        problem, policy, seed = cell.key
        line = f"{policy} x {problem} seed {seed}: {cell.status}"
        if cell.stats is not None:
            line += f", {done}/{cell.stats.iterations_target}, best {_best(cell.stats)}, solved {_solved(cell.stats)}"
        self.console.print(line + (f" ({cell.detail})" if cell.detail else ""), highlight=False)

    def render(self) -> Panel:
        table = Table(expand=False, box=None, padding=(0, 1))
        for column in ("policy", "problem", "seed", "run", "state", "iterations", "best", "solved at"):
            table.add_column(column, no_wrap=True)
        styles = {"finished": "green", "running": "cyan", "failed": "red", "interrupted": "yellow"}
        for cell in self.cells:
            problem, policy, seed = cell.key
            stats = cell.stats
            done = f"{stats.iterations_done}/{stats.iterations_target}" if stats else "-"
            table.add_row(policy, problem, str(seed), str(cell.run_id or "-"),
                          Text(cell.status, style=styles.get(cell.status, "dim")), done,
                          _best(stats) if stats else "-", _solved(stats) if stats else "-")
        running = sum(cell.status == "running" for cell in self.cells)
        finished = sum(cell.status == "finished" for cell in self.cells)
        footer = Text(f"{finished}/{len(self.cells)} cells finished, {running} running", style="dim")
        return Panel(Group(table, footer), title=self.title, border_style="green")


def _best(stats: RunStats) -> str:
    return f"{stats.best.scalar:.4f}" if stats.best else "-"


def _solved(stats: RunStats) -> str:
    return f"iteration {stats.first_solved.iteration}" if stats.first_solved else "-"
