"""Loads a file that is not in a package (scripts/*.py, a test server) as a module, so that tests call its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """The module in `path`, registered in sys.modules under `name` (the file's stem by default): dataclasses look
    their module up by name while it is executed, and one script may import another by name."""
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py as the module NAME."""
    return load_module(SCRIPTS / f"{name}.py")
