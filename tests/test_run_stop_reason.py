"""Why a run stopped is stored with its status and shown: a run stopped by a dead policy server, by SIGTERM or by
Ctrl-C is `interrupted` with the reason in runs.stop_reason, which `evolve show` (and --json) and `evolve serve`'s
run API give; a resume clears it, and a finished run has none."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fake_policy_server import FakePolicyServer
from serve_run import start_serve

from evolve.cli.main import main
from evolve.ports import free_port
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]


def run_flags(db: Path, url: str) -> list[str]:
    return ["--plain", "--db", str(db), "--problem", "fizzbuzz", "--iterations", "2",
            "--set", f"run.programs_dir='{ROOT / 'programs'}'", "--set", "policy.backend='openai'",
            "--set", f"policy.url='{url}'", "--set", "policy.model='fake'", "--set", "policy.retries=0"]


def stored(db: Path) -> tuple[str, str | None]:
    store = ProgramStore(str(db), mode="read")
    try:
        return store.get_run(1).status, store.stop_reason(1)
    finally:
        store.close()


def test_a_run_stopped_by_a_dead_server_stores_why_and_show_and_serve_say_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    main(["run", *run_flags(db, dead)])
    status, reason = stored(db)
    assert status == "interrupted" and reason is not None, (status, reason)
    assert reason.startswith("the policy became unavailable: ") and "/chat/completions" in reason, reason
    capsys.readouterr()

    assert main(["show", "1", "--db", str(db)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert f"why it stopped {reason}" in shown, shown
    assert main(["show", "1", "--json", "--db", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["stop_reason"] == reason
    server = start_serve(db)
    try:
        assert httpx.get(server.base + "/api/runs/1").json()["stop_reason"] == reason
        assert httpx.get(server.base + "/api/runs").json()["runs"][0]["stop_reason"] == reason
    finally:
        server.stop()

    with FakePolicyServer(latency_s=0.0) as alive:  # the server is back: the resume finishes and clears the reason
        assert main(["run", *run_flags(db, alive.url), "--resume", "1"]) == 0
    assert stored(db) == ("finished", None)
    capsys.readouterr()
    assert main(["show", "1", "--db", str(db)]) == 0
    assert "why it stopped" not in capsys.readouterr().out


@pytest.mark.parametrize(("sent", "reason"), [
    (signal.SIGTERM, "stopped by SIGTERM (a kill, or the machine shutting down)"),
    (signal.SIGINT, "interrupted by Ctrl-C (SIGINT)"),
])
def test_a_run_stopped_by_a_signal_stores_which(sent: signal.Signals, reason: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with FakePolicyServer(latency_s=0.5) as server:
        process = subprocess.Popen([sys.executable, "-m", "evolve", "run", *run_flags(db, server.url)], cwd=ROOT,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while server.requests == 0 and process.poll() is None:  # under way once it asks the policy
            time.sleep(0.05)
        process.send_signal(sent)
        process.wait(timeout=120)
    assert stored(db) == ("interrupted", reason)
