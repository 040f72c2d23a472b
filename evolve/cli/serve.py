"""`evolve serve`: the read-only web view of a store (runs, experiments, a run's program tree live)."""

from __future__ import annotations

import argparse
import textwrap

from rich.console import Console

from evolve.cli.common import run_config
from evolve.cli.conventions import add_set_flag

EXAMPLES = """examples:
  evolve serve                         the config's store at http://127.0.0.1:8765/
  evolve serve --db runs.db --port 0   another store, any free port (printed)
  evolve serve --host 0.0.0.0          reachable from other machines: needs the token it prints"""


def add_commands(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve", help="a read-only web view of a store: runs, experiments, the program tree growing live",
        description=textwrap.fill(
            "Serve a read-only web view of a store: the runs and experiments, each run's program tree (islands, "
            "parent to child, coloured by score, solved marked) updating while the run writes, and for each program "
            "its code, diff, prompt, completion and scores. Binds 127.0.0.1 unless --host says otherwise; a "
            "non-loopback host requires a token on every request.", 100),
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--db", default=None, help="SQLite file or SQLAlchemy URL (default: from config)")
    serve.add_argument("--config", "-c", default=None, help="config file whose run.db is served")
    add_set_flag(serve, "run.db=other.db", "the config's keys")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, this "
                                                           "machine only)")
    serve.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free port)")
    serve.add_argument("--token", default=None, help="token every request must carry (default: "
                                                     "$EVOLVE_SERVE_TOKEN, else generated for a non-loopback host)")
    serve.set_defaults(handler=cmd_serve)


def cmd_serve(args: argparse.Namespace, console: Console) -> int:
    from evolve.serve.server import ServeError, ServeSettings, serve

    if not 0 <= args.port <= 65535:
        raise ServeError(f"--port {args.port}: give 0..65535 (0: any free port)")
    db = args.db or run_config(args).run.db  # --db wins over the config and --set run.db=...
    serve(ServeSettings(db=db, host=args.host, port=args.port, token=args.token),
          lambda line: console.print(line, highlight=False, soft_wrap=True))
    return 0
