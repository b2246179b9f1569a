"""What a subprocess writes to one pipe (or pseudo-terminal), as it writes it: for tests of `chat`,
`ask` and `serve` run as real processes, which wait on a prompt that has no newline."""

from __future__ import annotations

import codecs
import contextlib
import os
import threading
import time


class Output:
    """Everything a subprocess writes to one pipe so far, read by a thread (the prompt has no newline)."""

    def __init__(self, pipe) -> None:
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(pipe.fileno(),), daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        # incremental: a read may end inside a character ("›" is three bytes), decoded with the next
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with contextlib.suppress(OSError):  # a pseudo-terminal ends in EIO, not end of file
            while chunk := os.read(fd, 4096):
                self.text += decoder.decode(chunk)

    def wait_for(self, words: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while words not in self.text:
            assert time.monotonic() < deadline, f"no {words!r} in {self.text!r}"
            time.sleep(0.05)

    def finished(self) -> str:
        self._thread.join(timeout=10)
        return self.text
