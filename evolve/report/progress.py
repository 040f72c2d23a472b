"""Live progress of a run or an experiment: rich panels on a terminal, plain lines elsewhere."""

from __future__ import annotations

import time
from types import TracebackType
from typing import Self

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from evolve.engine.events import (
    CellChanged,
    CellEnded,
    CellRunEvent,
    CellStarted,
    Event,
    ExperimentEnded,
    ExperimentPlanned,
)
from evolve.engine.experiment import CellProgress
from evolve.engine.experiment_spec import CellKey
from evolve.engine.run_stats import RunStats
from evolve.report.pace import Heartbeat, clock, eta, pace, pace_text


def _rate(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "0/0"


def summary_rows(stats: RunStats) -> list[tuple[str, str]]:
    elapsed = time.monotonic() - stats.started_at
    tokens_per_s = stats.completion_tokens / elapsed if elapsed > 0 else 0.0
    failures = ", ".join(f"{k} {v}" for k, v in sorted(stats.outcomes.items()) if k != "child") or "none"
    best = stats.best
    best_text = f"{best.scalar:.4f} (program {stats.run_id}:{stats.best_number}, iteration {best.iteration})" \
        if best else "-"
    solved = stats.first_solved
    solved_text = f"yes, at iteration {solved.iteration} (program {stats.run_id}:{stats.solved_number})" \
        if solved else "not yet"
    now = pace(stats)
    return [
        ("iterations", f"{stats.iterations_done}/{stats.iterations_target}"
                       + (f", stopped early: {stats.stopped}" if stats.stopped else "")),
        ("time", f"elapsed {clock(now.elapsed_s)}, ETA {clock(now.eta_s)}"),
        ("in flight", f"{stats.in_flight} policy requests, {stats.evaluating} evaluations"),
        ("iterations with a valid child", _rate(stats.iterations_with_child, stats.iterations_done)),
        ("children evaluated", str(stats.children)),
        ("other outcomes", failures),
        ("best scalar", best_text),
        ("solved", solved_text),
        ("generation", f"{stats.completion_tokens} tokens, {tokens_per_s:.1f} tokens/s over {elapsed:.0f}s"),
    ]


class _View:
    """What both views share: while open, a live panel on a terminal (redrawn 4 times a second from `_renderable`,
    so elapsed time and spinners move between updates), elsewhere the title, then plain lines and a heartbeat line
    (`_heartbeat_line`) when nothing was printed for `heartbeat_s` seconds."""

    def __init__(self, title: str, console: Console | None, live: bool | None, heartbeat_s: float) -> None:
        self.title = title
        self.console = console or Console()
        self.live_mode = self.console.is_terminal if live is None else live
        self.heartbeat_s = heartbeat_s
        self._live: Live | None = None
        self._heartbeat: Heartbeat | None = None

    def __enter__(self) -> Self:
        if self.live_mode:
            self._live = Live(console=self.console, refresh_per_second=4, transient=False,
                              get_renderable=self._renderable)
            self._live.__enter__()
        else:
            self.console.print(self.title, highlight=False)
            self._heartbeat = Heartbeat(self._heartbeat_line, self._emit, self.heartbeat_s).__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._heartbeat is not None:
            self._heartbeat.__exit__(exc_type, exc, tb)
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(exc_type, exc, tb)

    def _emit(self, line: str) -> None:
        self.console.print(line, highlight=False, soft_wrap=True)

    def _renderable(self) -> RenderableType:
        raise NotImplementedError

    def _heartbeat_line(self) -> str:
        raise NotImplementedError


class ProgressView(_View):
    """Context manager that renders RunStats; call update() whenever the stats change. On a terminal a live panel;
    elsewhere one line per iteration with the same facts, and a heartbeat line when quiet."""

    def __init__(self, title: str, console: Console | None = None, live: bool | None = None,
                 heartbeat_s: float = 30.0) -> None:
        super().__init__(title, console, live, heartbeat_s)
        self._stats: RunStats | None = None
        self._printed = 0

    def _renderable(self) -> RenderableType:
        if self._stats is None:
            return Panel(Spinner("dots", "starting: loading the problem and scoring the seed program"),
                         title=self.title, border_style="green")
        return self.render(self._stats)

    def _heartbeat_line(self) -> str:
        stats = self._stats
        if stats is None:
            return "... starting: loading the problem and scoring the seed program"
        doing = pace(stats).waiting_on or "working"
        return f"[{stats.iterations_done}/{stats.iterations_target}] ... {doing}; {pace_text(stats)}"

    def update(self, stats: RunStats) -> None:
        self._stats = stats
        if self._live is not None:
            self._live.refresh()
            return
        if stats.iterations_done > self._printed and stats.recent:
            self._printed = stats.iterations_done
            best = f"{stats.best.scalar:.4f}" if stats.best else "-"
            self._emit(f"[{stats.iterations_done}/{stats.iterations_target}] {stats.recent[-1]}  (best {best}; "
                       f"{pace_text(stats)})")
            if self._heartbeat is not None:
                self._heartbeat.printed()
        if stats.stopped and self._printed != -1:
            self._printed = -1
            self._emit(f"stopping early: {stats.stopped}")

    def render(self, stats: RunStats) -> Panel:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan")
        table.add_column()
        table.add_row("progress", ProgressBar(total=stats.iterations_target, completed=stats.iterations_done,
                                              width=60))
        for key, value in summary_rows(stats):
            table.add_row(key, value)
        waiting = pace(stats).waiting_on
        recent: RenderableType = Text("\n".join(stats.recent), style="dim")
        if waiting:
            recent = Spinner("dots", Text(waiting, style="dim"))
        return Panel(Group(table, Text(""), recent), title=self.title, border_style="green")


class ExperimentView(_View):
    """Live table of an experiment's cells on a terminal; elsewhere one line per cell event and per iteration, with
    the same facts (elapsed, ETA, requests in flight, what a cell at 0/N waits on) and a heartbeat when quiet."""

    def __init__(self, title: str, cells: list[CellProgress], console: Console | None = None,
                 live: bool | None = None, heartbeat_s: float = 30.0, parallel_cells: int = 1) -> None:
        super().__init__(title, console, live, heartbeat_s)
        self.cells = cells
        self.parallel_cells = parallel_cells
        self._shown: dict[CellKey, tuple[str, int, str]] = {}
        self._started = time.monotonic()

    def __enter__(self) -> Self:
        self._started = time.monotonic()
        return super().__enter__()

    def _renderable(self) -> RenderableType:
        return self.render()

    def update(self, cell: CellProgress) -> None:
        if self._live is not None:
            self._live.refresh()
            return
        done = cell.stats.iterations_done if cell.stats else 0
        waiting = _waiting(cell)
        if self._shown.get(cell.key) == (cell.status, done, waiting):
            return
        self._shown[cell.key] = (cell.status, done, waiting)
        problem, policy, seed = cell.key
        line = f"{policy} x {problem} seed {seed}: {cell.status}"
        if cell.stats is not None:
            line += (f", {done}/{cell.stats.iterations_target}, best {_best(cell.stats)}, solved {_solved(cell.stats)}"
                     f"; {pace_text(cell.stats)}")
        note = waiting or cell.detail
        self._emit(line + (f" ({note})" if note else ""))
        if self._heartbeat is not None:
            self._heartbeat.printed()

    def _heartbeat_line(self) -> str:
        running = [cell for cell in self.cells if cell.status == "running"]
        waiting = [f"{'/'.join(map(str, cell.key))}: {_waiting(cell)}" for cell in running if _waiting(cell)]
        finished = sum(cell.status == "finished" for cell in self.cells)
        return (f"... elapsed {clock(time.monotonic() - self._started)}, ETA {clock(self._eta())}: "
                f"{finished}/{len(self.cells)} cells finished, {len(running)} running, "
                f"{sum(cell.stats.in_flight for cell in running if cell.stats)} requests in flight"
                + (f"; {'; '.join(waiting)}" if waiting else ""))

    def _eta(self) -> float | None:
        """The unfinished cells' time at the pace of the running ones: each running cell's own ETA, a cell not
        started yet a whole budget at the running cells' mean time per iteration, `parallel_cells` at a time (never
        less than the longest running cell's ETA). Models loading between policies are not counted."""
        unfinished = [cell for cell in self.cells if cell.status not in ("finished", "failed")]
        if not unfinished:
            return 0.0
        now = time.monotonic()
        running = [cell.stats for cell in unfinished if cell.status == "running" and cell.stats is not None]
        left = [found for found in (eta(stats, now) for stats in running) if found is not None]
        whole = [stats.iterations_target * per / max(1, stats.workers) for stats in running
                 if (per := stats.seconds_per_iteration(now)) is not None]
        if not left or not whole:
            return None
        waiting = len(unfinished) - len(running)
        parallel = max(1, min(self.parallel_cells, len(unfinished)))
        return max(max(left), (sum(left) + waiting * sum(whole) / len(whole)) / parallel)

    def render(self) -> Panel:
        table = Table(expand=False, box=None, padding=(0, 1))
        for column in ("policy", "problem", "seed", "run", "state", "iterations", "best", "solved at", "elapsed",
                       "ETA", "in flight"):
            table.add_column(column, no_wrap=True)
        table.add_column("", overflow="fold")  # what a cell waits on, or why it stopped: wraps before cells are cut
        styles = {"finished": "green", "running": "cyan", "failed": "red", "interrupted": "yellow"}
        for cell in self.cells:
            problem, policy, seed = cell.key
            stats = cell.stats
            done = f"{stats.iterations_done}/{stats.iterations_target}" if stats else "-"
            running = cell.status == "running" and stats is not None
            now = pace(stats) if stats is not None else None
            waiting = _waiting(cell)
            note: RenderableType = Text(cell.detail, style="dim")
            if waiting or (cell.status == "running" and stats is None):
                note = Spinner("dots", Text(waiting or "starting", style="dim"))
            table.add_row(policy, problem, str(seed), str(cell.run_id or "-"),
                          Text(cell.status, style=styles.get(cell.status, "dim")), done,
                          _best(stats) if stats else "-", _solved(stats) if stats else "-",
                          clock(now.elapsed_s) if running and now else "-",
                          clock(now.eta_s) if running and now else "-",
                          str(stats.in_flight) if running and stats else "-", note)
        running_cells = sum(cell.status == "running" for cell in self.cells)
        finished = sum(cell.status == "finished" for cell in self.cells)
        footer = Text(f"{finished}/{len(self.cells)} cells finished, {running_cells} running; elapsed "
                      f"{clock(time.monotonic() - self._started)}, ETA {clock(self._eta())}", style="dim")
        return Panel(Group(table, footer), title=self.title, border_style="green")


class ExperimentDrawing:
    """An observer of an experiment's events that draws them: an ExperimentView opened when the cells are planned,
    updated as cells move, closed when the experiment ends (or by close(), for an experiment that failed first)."""

    def __init__(self, console: Console, live: bool | None = None) -> None:
        self.console = console
        self.live = live
        self._view: ExperimentView | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, ExperimentPlanned):
            self.close()
            self._view = ExperimentView(f"evolve experiment {event.name}", list(event.cells), self.console,
                                        live=self.live, parallel_cells=event.parallel_cells).__enter__()
        elif isinstance(event, ExperimentEnded):
            self.close()
        elif self._view is not None and isinstance(event, CellStarted | CellChanged | CellRunEvent | CellEnded):
            self._view.update(event.cell)

    def close(self) -> None:
        if self._view is not None:
            self._view.__exit__(None, None, None)
            self._view = None


def _waiting(cell: CellProgress) -> str:
    return pace(cell.stats).waiting_on if cell.status == "running" and cell.stats is not None else ""


def _best(stats: RunStats) -> str:
    return f"{stats.best.scalar:.4f}" if stats.best else "-"


def _solved(stats: RunStats) -> str:
    return f"iteration {stats.first_solved.iteration}" if stats.first_solved else "-"
