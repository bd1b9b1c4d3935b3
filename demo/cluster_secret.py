"""The demo's own cluster secret, so that it runs the way pdkv should be run.

Without a cluster secret nothing between pdkv's processes is authenticated and each of
them says so at start (docs/SECURITY.md); a demo that prints that five times teaches the
wrong set-up. So the demo makes a secret the way docs/SECURITY.md provisions one (32 bytes
from the operating system's random source, a file readable by its owner only), in a
directory only this user may enter, hands it to every process through PDKV_SECRET_FILE,
and removes it when it exits. A PDKV_SECRET_FILE already set wins: the demo then runs
under that secret and makes none."""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from typing import Iterator, Tuple

ENV = "PDKV_SECRET_FILE"
# pdkv's minimum secret length (ClusterKey::kMinSecretBytes), as docs/SECURITY.md makes one.
SECRET_BYTES = 32


@contextlib.contextmanager
def demo_secret() -> Iterator[Tuple[str, bool]]:
    """Yields (path, made) with PDKV_SECRET_FILE set to path in this process's environment:
    the in-process bootstrap server reads it there, and every process the demo starts
    inherits it. made is False when the caller's own PDKV_SECRET_FILE is used (left as it
    is); otherwise the file and its directory are removed on the way out, whatever ends
    the block."""
    if os.environ.get(ENV):
        yield os.environ[ENV], False
        return
    directory = tempfile.mkdtemp(prefix="pdkv-demo-")  # mode 700
    path = os.path.join(directory, "secret")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # exactly 600 whatever the umask
            f.write(secrets.token_bytes(SECRET_BYTES))  # os.urandom: the kernel's source
        os.environ[ENV] = path
        yield path, True
    finally:
        if os.environ.get(ENV) == path:
            del os.environ[ENV]
        shutil.rmtree(directory, ignore_errors=True)
