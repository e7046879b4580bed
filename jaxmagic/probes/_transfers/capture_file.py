"""The file descriptor 2 points at while a block runs under ``jax.transfer_guard("log")``.

JAX's C++ runtime writes one line per implicit transfer to descriptor 2; the probe
points it at this file and, at every user line, asks whether anything was written
since the line before. The file is memory-mapped so that question is one byte of
memory rather than a system call.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile

TRUNCATE_AT = 1 << 20  # bytes of captured stderr after which the file is emptied again
MAPPED_BYTES = 4 << 20  # size of the capture file's memory map (sparse; above TRUNCATE_AT)


class CaptureFile:
    """The file descriptor 2 points at during the block, and a check for new bytes that costs no system call.

    The file is not in append mode: descriptor 2 shares its offset, so every
    write lands at the end of what was written before. It is sized to
    ``MAPPED_BYTES`` up front (sparse: it reads as zeros) and memory-mapped,
    so "has anything been written since ``read``?" is one byte of memory
    (non-zero: written) instead of an ``fstat`` per user line, which costs
    microseconds. Where mapping fails, every check asks the file instead.
    """

    def __init__(self) -> None:
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.fd = self.file.fileno()
        self.read = 0  # bytes handed on so far
        self.mapped = None
        try:
            os.ftruncate(self.fd, MAPPED_BYTES)
            self.mapped = mmap.mmap(self.fd, MAPPED_BYTES)
        except (OSError, ValueError, AttributeError):
            os.ftruncate(self.fd, 0)
        # view[read] is non-zero when something was written since the last take() (a NUL byte written
        # first is seen at the next write); without a mapping, every check asks the file.
        self.view = self.mapped if self.mapped is not None else _ALWAYS_WRITTEN

    def take(self) -> bytes:
        """The bytes written since the last call; the file is emptied again once it has grown large."""
        end = os.lseek(self.fd, 0, os.SEEK_CUR)  # where the next write lands (descriptor 2's offset)
        if end <= self.read:
            return b""
        if self.mapped is not None and end <= MAPPED_BYTES:
            data = self.mapped[self.read : end]
        else:
            data = _read_at(self.fd, end - self.read, self.read)
        self.read = end
        if self.read > TRUNCATE_AT or self.read >= MAPPED_BYTES:  # keep the file small in a long cell
            if self.mapped is not None:
                self.mapped[: min(self.read, MAPPED_BYTES)] = bytes(min(self.read, MAPPED_BYTES))
                with contextlib.suppress(OSError):  # what was written past the mapping
                    os.ftruncate(self.fd, MAPPED_BYTES)
            else:
                os.ftruncate(self.fd, 0)
            os.lseek(self.fd, 0, os.SEEK_SET)
            self.read = 0
        return data

    def close(self) -> None:
        if self.mapped is not None:
            self.mapped.close()
        self.file.close()


class _AlwaysWritten:
    """Stands in for the memory map where there is none: "maybe written" at every offset."""

    def __getitem__(self, offset: int) -> int:
        return 1


_ALWAYS_WRITTEN = _AlwaysWritten()


def _read_at(fd: int, size: int, offset: int) -> bytes:
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    end = os.lseek(fd, 0, os.SEEK_CUR)  # Windows has no pread: descriptor 2 shares this offset, so put it back
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)
    finally:
        os.lseek(fd, end, os.SEEK_SET)
