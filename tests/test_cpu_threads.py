"""What threads = 0 means for a local model: $EVOLVE_THREADS, else the cores this process may run on."""

from __future__ import annotations

import os

import pytest

from evolve.errors import UserError
from evolve.policies.cpu import THREADS_ENV, cpu_threads


def test_a_setting_above_zero_is_taken_as_it_is_whatever_the_environment_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_ENV, "5")
    assert cpu_threads(3) == 3


def test_zero_takes_the_environment_variable_and_else_the_cores_this_process_may_use(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_ENV, "1")
    assert cpu_threads(0) == 1
    monkeypatch.delenv(THREADS_ENV)
    assert cpu_threads(0) == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_an_environment_variable_that_is_not_a_count_of_threads_is_one_clear_error(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(THREADS_ENV, value)
    with pytest.raises(UserError, match=f"{THREADS_ENV}='{value}': a whole number of threads, at least 1"):
        cpu_threads(0)
