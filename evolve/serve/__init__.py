"""`evolve serve`: a read-only web view of a store (runs, experiments, a run's program tree growing live)."""
