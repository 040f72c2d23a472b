import os
import tempfile


def solve(text):
    with open("note.txt", "w") as handle:
        handle.write(text)
    with tempfile.NamedTemporaryFile("w", delete=False) as temporary:
        temporary.write(text)
    with open("note.txt") as handle:
        return {"read_back": handle.read(), "temp_in_cwd": os.path.dirname(temporary.name) == os.getcwd()}
