"""Reading a user's input file without hanging on it: one guard for every reader of the core.

A path a user names may be anything the file system holds: ``/dev/zero`` (endless), a FIFO (``open``
blocks until a writer comes), a directory, or a file far larger than any input we take. Each reader
(topology files, schedule CSVs, JSON exports) reads through :func:`read_input_bytes`, which looks at the
path with ``stat`` first (that never blocks), refuses anything but a regular file, and never reads more
than ``max_bytes`` (the size ``stat`` reports may be stale, so the read itself is capped too).

Examples
--------
>>> import tempfile, pathlib
>>> p = pathlib.Path(tempfile.mkdtemp()) / "x.txt"
>>> _ = p.write_text("4\\n")
>>> read_input_bytes(p, "topology file")
b'4\\n'
>>> read_input_bytes("/dev/zero", "topology file")
Traceback (most recent call last):
...
tacos_bench.errors.InputFileError: /dev/zero: not a regular file (a character device); give a topology file
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import InputFileError

__all__ = ["MAX_INPUT_BYTES", "read_input_bytes", "read_input_text"]

# Far above any input we take (the 40,000-NPU mesh's edge list is about 5 MiB, a schedule CSV of 10 M rows
# about 400 MiB), and small enough that a wrong path fails in seconds instead of filling the memory.
MAX_INPUT_BYTES = 1 << 30

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    for test, word in _KINDS:
        if test(mode):
            return word
    return "not a regular file"


def read_input_bytes(path, what: str, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` (default :data:`MAX_INPUT_BYTES`).

    Parameters
    ----------
    path : str or path-like
    what : str
        What the file should be, for the message (``"topology file"``, ``"schedule CSV"``).
    max_bytes : int, optional

    Raises
    ------
    InputFileError
        The path is missing, not a regular file (directory, FIFO, device, socket), larger than the cap,
        or unreadable; the message names the path and is one line.
    """
    path = Path(path)
    cap = MAX_INPUT_BYTES if max_bytes is None else int(max_bytes)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputFileError(path, "no such file") from None
    except OSError as e:
        raise InputFileError(path, f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(path, f"not a regular file ({_kind(st.st_mode)}); give a {what}")
    too_big = f"larger than the {cap:,} bytes a {what} may have"
    if st.st_size > cap:
        raise InputFileError(path, f"{too_big} ({st.st_size:,} bytes)")
    try:
        # O_NONBLOCK: should the path have become a FIFO since the stat, open returns instead of waiting
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(cap + 1)
    except OSError as e:
        raise InputFileError(path, f"cannot read: {e.strerror or e}") from None
    if len(data) > cap:
        raise InputFileError(path, too_big)
    return data


def read_input_text(path, what: str, max_bytes: int | None = None) -> str:
    """:func:`read_input_bytes` decoded as UTF-8; a byte-order mark at the start is dropped (editors on
    Windows write one), any other invalid byte is an error naming its offset."""
    data = read_input_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputFileError(path, f"not a UTF-8 text file ({e.reason} at byte {e.start})") from None
