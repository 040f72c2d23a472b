"""The `evolve` command line: a thin layer over the engine, the store and the reports."""
