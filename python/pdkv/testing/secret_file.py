"""Cluster secret files for tests: written as an operator must (mode 0600, or pdkv
refuses to read them)."""
from __future__ import annotations

import os


def write_secret(path, content: bytes) -> str:
    """Writes `content` (the secret's bytes, as they are) to `path` with mode 0600;
    returns the path as a string."""
    with open(path, "wb") as f:
        f.write(content)
    os.chmod(path, 0o600)
    return str(path)
