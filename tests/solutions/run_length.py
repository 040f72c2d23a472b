"""Known-good solution for run_length; never shown to the policy."""


# EVOLVE-BLOCK-START
def encode(s: str) -> str:
    parts = []
    count = 0
    for index, char in enumerate(s):
        count += 1
        if index + 1 == len(s) or s[index + 1] != char:
            parts.append(f"{count}{char}")
            count = 0
    return "".join(parts)
# EVOLVE-BLOCK-END
