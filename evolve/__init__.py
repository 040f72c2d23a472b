"""evolve: evolutionary program search driven by language-model policies, with vector scores."""
