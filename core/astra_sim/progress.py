"""What a long command is doing, on stderr, so that no one waits in silence.

Every ``astra`` command runs in one :func:`activity`: silent for ``delay_s`` (a quick command prints nothing), then
the command, its phase and the time elapsed, as a status line on a terminal or a line every ``interval_s`` (logs,
``nohup``). Work names its phases with :func:`phase`, free without an activity (the Python API). ``ASTRA_PROGRESS=0``,
``ASTRA_PROGRESS_DELAY_S`` and ``ASTRA_PROGRESS_INTERVAL_S`` set it; a command with its own display calls :func:`hold`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

DELAY_S = 2.0
INTERVAL_S = 5.0

_current = None


def phase(text, detail=None, lead=False):
    """Name what the command does now; ``detail``: a callable polled for a live figure. ``lead``: the command's own
    phase, which the phases of the runs it makes (a serving step's) do not replace."""
    current = _current
    if current is None or current.led and not (lead and current.led == text):
        return
    current.phase, current.detail = text, detail
    if lead:
        current.led = text


@contextlib.contextmanager
def hold():
    """Keep the activity quiet inside the block (the command shows its own progress there)."""
    current = _current
    if current is None:
        yield
        return
    current.held += 1
    current.clear()
    try:
        yield
    finally:
        current.held -= 1


@contextlib.contextmanager
def activity(command, enabled=True, stream=None, delay_s=DELAY_S, interval_s=None, since=None):
    """Show ``command``'s progress while the block runs; ``since``: its start (plugin loading counts as waiting)."""
    global _current
    silenced = os.environ.get("ASTRA_PROGRESS", "1").strip().lower() in ("0", "false", "no", "off")
    if not enabled or silenced or _current is not None:
        yield None
        return
    if interval_s is None:
        interval_s = max(0.05, _seconds_from_environment("ASTRA_PROGRESS_INTERVAL_S", INTERVAL_S))
    delay_s = _seconds_from_environment("ASTRA_PROGRESS_DELAY_S", delay_s)
    current = _Activity(command, stream or sys.stderr, delay_s, interval_s, since)
    _current = current
    current.start()
    try:
        yield current
    finally:
        _current = None
        current.stop()


def _seconds_from_environment(name, default):
    try:
        return max(0.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def _seconds(elapsed_s):
    minutes, seconds = divmod(int(elapsed_s), 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


class _Activity:
    """The watcher thread of one command: it only reads ``phase`` and ``detail``; the work never waits on it."""

    def __init__(self, command, stream, delay_s, interval_s, since=None):
        self.command = command
        self.stream = stream
        self.delay_s = delay_s
        self.interval_s = interval_s
        self.phase = "working"
        self.detail = None
        self.led = None
        self.held = 0
        self.started = time.monotonic() if since is None else since
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="astra-progress", daemon=True)
        self._status = None

    def line(self):
        text = f"{self.command}: {self.phase}"
        detail = self.detail
        if detail is not None:
            try:
                figure = detail()
            except Exception:  # a figure read mid-update; the next poll shows it
                figure = None
            if figure:
                text += f" ({figure})"
        return f"{text}, {_seconds(time.monotonic() - self.started)} elapsed"

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.clear()

    def clear(self):
        status, self._status = self._status, None
        if status is not None:
            with contextlib.suppress(Exception):
                status.stop()

    def _watch(self):
        if self._stop.wait(max(0.0, self.delay_s - (time.monotonic() - self.started))):
            return
        poll = 0.25 if self.tty else self.interval_s
        while not self._stop.is_set():
            if not self.held:
                with contextlib.suppress(Exception):  # a closed stream never stops the work
                    self._show()
            if self._stop.wait(poll):
                return

    def _show(self):
        if not self.tty:
            print(self.line(), file=self.stream, flush=True)
            return
        if self._status is None:
            from rich.console import Console

            self._status = Console(file=self.stream).status(self.line())
            self._status.start()
        else:
            self._status.update(self.line())
