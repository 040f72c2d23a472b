"""Run-length encoding: encode("aaabcc") should return "3a1b2c"."""

# EVOLVE-BLOCK-START
def encode(s: str) -> str:
    """Each run of one repeated character becomes its length followed by the character."""
    return "".join("1" + c for c in s)
# EVOLVE-BLOCK-END
