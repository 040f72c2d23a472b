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
    """scripts/KIND/NAME.py (bench, dev, install, study) as the module NAME, its folder on sys.path so that it
    imports its siblings as it does when run."""
    found = sorted(SCRIPTS.glob(f"*/{name}.py"))
    assert len(found) == 1, f"scripts/*/{name}.py: {len(found)} found"
    if str(found[0].parent) not in sys.path:
        sys.path.insert(0, str(found[0].parent))
    return load_module(found[0])
