"""The sandbox: runs an untrusted candidate program confined (Landlock, rlimits, its own session)."""
