"""Problems: folders with a seed program and an evaluator, the trusted evaluator process, checks, imports."""
