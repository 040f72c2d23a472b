"""Tasks ended once: a Ctrl-C cancels every cell of an experiment once, so each can finish its own clean-up."""

from __future__ import annotations

import asyncio
import gc

import pytest

from evolve.engine.driving import end_tasks


async def _cell(cleaned: list[str], name: str, turns: int = 1) -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        for _ in range(turns):  # a clean-up that takes turns of the loop (a status written, workers ended)
            await asyncio.sleep(0)
        cleaned.append(name)
        raise


def test_cells_whose_gather_was_cancelled_are_not_cancelled_again_in_their_clean_up() -> None:
    async def scenario() -> list[str]:
        cleaned: list[str] = []
        tasks = [asyncio.create_task(_cell(cleaned, name, turns)) for name, turns in (("a", 1), ("b", 5), ("c", 20))]
        await asyncio.sleep(0)
        gathered = asyncio.gather(*tasks)
        gathered.cancel()  # as a cancelled caller does: it ends with the first cancelled cell, the others still ending
        with pytest.raises(asyncio.CancelledError):
            await gathered
        await end_tasks(tasks)
        assert all(task.cancelled() for task in tasks)
        return cleaned

    assert sorted(asyncio.run(scenario())) == ["a", "b", "c"]


def test_tasks_not_yet_cancelled_are_cancelled_and_their_errors_are_not_logged_as_unretrieved(
        caplog: pytest.LogCaptureFixture) -> None:
    async def failing() -> None:
        raise ValueError("a request's own error")

    async def scenario() -> list[str]:
        cleaned: list[str] = []
        waiting = asyncio.create_task(_cell(cleaned, "waiting"))
        failed = asyncio.create_task(failing())
        await asyncio.sleep(0)
        await end_tasks([waiting, failed])
        assert waiting.cancelled() and isinstance(failed.exception(), ValueError)
        return cleaned

    with caplog.at_level("ERROR", logger="asyncio"):
        assert asyncio.run(scenario()) == ["waiting"]
        gc.collect()
    assert "never retrieved" not in caplog.text
