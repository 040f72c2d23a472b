"""The program store: every run, program, attempt and request in one SQLAlchemy database."""
