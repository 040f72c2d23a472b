"""llama.cpp's raw bindings (llama_cpp.llama_cpp), loaded once per process with its log silenced."""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from evolve.policies.engine_requests import EngineError

_LOG_SILENCER: list[Any] = []  # keeps the ctypes callback alive for as long as llama.cpp may call it
_BACKEND_LOCK = threading.Lock()


def load_llama() -> Any:
    try:
        import llama_cpp.llama_cpp as llama
    except ImportError as exc:
        raise EngineError("the llamacpp backend needs llama-cpp-python (scripts/install.sh installs it; "
                          "or set policy.backend = \"hf\")") from exc
    with _BACKEND_LOCK:
        if not _LOG_SILENCER:
            callback = llama.llama_log_callback(lambda level, text, data: None)
            _LOG_SILENCER.append(callback)
            llama.llama_log_set(callback, ctypes.c_void_p(0))
            llama.llama_backend_init()
    return llama
