"""`evolve serve`: the read-only web view of a store (runs, experiments, a run's program tree live)."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from rich.console import Console

from evolve.cli.common import run_config
from evolve.cli.conventions import add_set_flag

EXAMPLES = """examples:
  evolve serve                         the config's store at http://127.0.0.1:8765/, and the stores of the
                                       experiments in ./experiments/ (each at /stores/K/, picked on the page)
  evolve serve --db runs.db --port 0   that store alone, any free port (printed)
  evolve serve --db a.db --db b.db     both, b.db at /stores/1/
  evolve serve --host 0.0.0.0          reachable from other machines: needs the token it prints"""
EXPERIMENTS = Path("experiments")  # where `evolve experiment NAME` and `evolve report NAME` look for NAME.toml


def add_commands(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve", help="a read-only web view of a store: runs, experiments, the program tree growing live",
        description=textwrap.fill(
            "Serve a read-only web view of a store: the runs and experiments, each run's program tree (islands, "
            "parent to child, coloured by score, solved marked) updating while the run writes, and for each program "
            "its code, diff, prompt, completion and scores. Several stores are served together, picked on the "
            "page. Binds 127.0.0.1 unless --host says otherwise; a "
            "non-loopback host requires a token on every request.", 100),
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--db", action="append", default=None, metavar="DB",
                       help="SQLite file or SQLAlchemy URL; again for more stores (default: the config's store and "
                            "the stores of the experiment files in ./experiments/)")
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
    if args.db:  # --db wins over the config and --set run.db=..., and names every store served
        first, more, found = args.db[0], tuple(dict.fromkeys(args.db[1:])), ()
    else:
        first, found = run_config(args).run.db, experiment_stores(EXPERIMENTS)
        found = tuple(db for db in found if not _same(db, first))
        if found and not _exists(first):  # after `evolve experiment`, the config's store may never have been made
            first, found = found[0], found[1:]
        more = ()
    serve(ServeSettings(db=first, more=more, found=found, host=args.host, port=args.port, token=args.token),
          lambda line: console.print(line, highlight=False, soft_wrap=True))
    return 0


def experiment_stores(folder: Path) -> tuple[str, ...]:
    """The stores of the experiment files in `folder` that exist (a SQLite file made, or a database URL; each begun
    piece's of an experiment in pieces), once each, in file name order; files that are no experiment (a study's) are
    passed over."""
    from evolve.engine.experiment_pieces import piece_db, piece_numbers
    from evolve.engine.experiment_spec import load_experiment
    from evolve.errors import UserError

    stores: list[str] = []
    for path in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
        try:
            spec = load_experiment(path)
        except (UserError, OSError):
            continue
        for db in [piece_db(spec, piece) for piece in piece_numbers(spec)] if spec.pieces > 1 else [spec.db]:
            if _exists(db) and not any(_same(db, known) for known in stores):
                stores.append(db)
    return tuple(stores)


def _exists(db: str) -> bool:
    return "://" in db or Path(db).is_file()


def _same(one: str, other: str) -> bool:
    return one == other or ("://" not in one and "://" not in other and Path(one).resolve() == Path(other).resolve())
