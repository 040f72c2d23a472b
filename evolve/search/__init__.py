"""The search's parts: parent selection, MAP-Elites islands, prompts and their templates, edits."""
