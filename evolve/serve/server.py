"""Starting `evolve serve`: the token rule (none on loopback unless asked, required elsewhere), the bound socket (so
port 0 prints the port the OS chose), and uvicorn serving the app until Ctrl-C."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

from evolve.errors import UserError
from evolve.serve.auth import TOKEN_ENV, is_loopback, new_token


class ServeError(UserError):
    """`evolve serve` cannot start: a port in use, a host that does not resolve, an empty token."""


@dataclass(frozen=True)
class ServeSettings:
    db: str  # the first store, served at /
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None  # None: from EVOLVE_SERVE_TOKEN, else generated where the host is not loopback
    more: tuple[str, ...] = ()  # further stores, each served at /stores/K (K = 1, 2, ...)
    found: tuple[str, ...] = ()  # stores found beside experiment files: served when they open, else skipped


def resolve_token(host: str, given: str | None) -> tuple[str | None, bool]:
    """(the token every request must carry or None, whether it was generated here). A loopback bind needs none
    unless one is given; any other needs one: --token, else $EVOLVE_SERVE_TOKEN, else a new random one."""
    token = given if given is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise ServeError("--token is empty: give a token, or leave it out to have one generated")
    if token is None and not is_loopback(host):
        return new_token(), True
    return token, False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 lets the OS choose."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ServeError(f"--host {host}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror} (pick another --port)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def address(host: str, port: int, token: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def serve(settings: ServeSettings, say: Callable[[str], None]) -> None:
    """Serve the stores of `settings` until interrupted; `say` prints the addresses and the token rule."""
    import uvicorn

    from evolve.serve.app import create_app
    from evolve.store.program_store import ProgramStore, StoreError, shown_store

    stores = [ProgramStore(db, mode="read") for db in (settings.db, *settings.more)]
    for db in settings.found:
        try:
            stores.append(ProgramStore(db, mode="read"))
        except StoreError as exc:
            say(f"not serving {db}: {exc}")
    token, generated = resolve_token(settings.host, settings.token)
    sock = bind(settings.host, settings.port)
    port = sock.getsockname()[1]
    if not is_loopback(settings.host):
        say(f"listening on {settings.host}: reachable from other machines, so every request needs the token")
    if token and generated:
        say(f"the token was generated for this start (set --token or ${TOKEN_ENV} to choose one); "
            "opening the address below once keeps it as a cookie")
    say(f"evolve serve: {shown_store(settings.db)} (read-only) at {address(settings.host, port, token)}")
    for index, store in enumerate(stores[1:], start=1):
        say(f"  and {store.url.removeprefix('sqlite:///')} at {address(settings.host, port, None)}stores/{index}/")
    say("Ctrl-C stops it")
    config = uvicorn.Config(create_app(stores, token, loopback_only=is_loopback(settings.host)), log_level="warning",
                            lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        for store in stores:
            store.close()
