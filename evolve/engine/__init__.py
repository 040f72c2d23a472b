"""The engine: the evolution loop, experiments of many runs, plain sampling, the iteration schedule."""
