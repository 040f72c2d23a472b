# Developer shortcuts; the README's two commands are the source of truth.
.PHONY: install run test fast lint bench
install:
	bash scripts/install.sh
run: install
	.venv/bin/evolve run
test: install
	bash scripts/test.sh
fast:
	.venv/bin/python -m pytest -q -m "not slow"
lint:
	.venv/bin/ruff check evolve tests scripts
bench:
	.venv/bin/python scripts/bench/bench_engine.py
	.venv/bin/python scripts/bench/bench_sandbox.py
