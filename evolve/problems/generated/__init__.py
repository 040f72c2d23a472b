"""Generated code problems (issue 60): seeded compositions of list and string operations, written as problem folders
by `evolve import generated`, each with a specification in words, visible examples and hidden tests."""
