"""Statistics that both the engine and the reports use (pass@k and best@k), below both in the package map."""
