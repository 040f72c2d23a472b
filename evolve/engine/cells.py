"""An experiment's cells as they move: each cell's progress (run, status, live counters) and the outcome of them
all; the runner (engine/experiment.py) updates them, the events (engine/events.py) carry them to observers."""

from __future__ import annotations

from dataclasses import dataclass, field

from evolve.engine.experiment_spec import CellKey
from evolve.engine.run_stats import RunStats


@dataclass
class CellProgress:
    key: CellKey
    run_id: int | None = None
    status: str = "waiting"
    stats: RunStats | None = None
    detail: str = ""


@dataclass
class ExperimentOutcome:
    cells: dict[CellKey, CellProgress]
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False

    @property
    def finished(self) -> bool:
        return not self.interrupted and all(cell.status == "finished" for cell in self.cells.values())
