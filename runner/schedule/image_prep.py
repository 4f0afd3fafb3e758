"""The runner's preparation of task images: in the background, in the order the queue needs them.

Why in the background: a SWE-Marathon task image takes minutes to build. Built up front, every task
would wait for every build; built in the driver's loop, no finished attempt would be reaped while
one builds. So one worker thread prepares the tasks in queue order (``Launcher.prepare_image``: on
this host's engine, or on one host of a cluster and shipped to the others), and the driver starts a
pair only once its task's image is ready; the first task's arms start after one build, while the
next task builds. One worker: two builds of one task never run at once (that is the race that
gave the arms different bytes), and a small machine is not asked for two builds at a time.

The worker never writes the journal: the driver takes its outcomes (``news``) and emits them from
its own thread, so event lines and the progress display stay in order.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from runner.schedule.task_images import TaskImage

#: a task's image is being prepared (or waits for the worker)
PENDING = "pending"
#: ready: the image (None: a task harbor runs as it is, with its own ``docker_image``, or not on Docker)
READY = "ready"
#: the image could not be made; retried in the next pass (``retry_failed``)
FAILED = "failed"

Prepare = Callable[[str, Callable[[subprocess.Popen], None]], TaskImage | None]


@dataclass(frozen=True)
class Outcome:
    task: str
    state: str  # READY or FAILED
    image: TaskImage | None = None
    error: str = ""


class ImagePrep:
    """Prepares each wanted task's image once (see the module docstring)."""

    def __init__(self, prepare: Prepare) -> None:
        self._prepare = prepare
        self._lock = threading.Lock()
        self._state: dict[str, Outcome | None] = {}  # None: pending
        self._news: list[Outcome] = []
        self._todo: queue.Queue[str | None] = queue.Queue()
        self._proc: subprocess.Popen | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="task-images", daemon=True)
        self._thread.start()

    def want(self, tasks: list[str]) -> None:
        """Queue the tasks not asked for yet, in this order."""
        with self._lock:
            for t in tasks:
                if t not in self._state:
                    self._state[t] = None
                    self._todo.put(t)

    def state(self, task: str) -> tuple[str, Outcome | None]:
        """(PENDING | READY | FAILED, the outcome); a task never asked for is asked for now."""
        self.want([task])
        with self._lock:
            got = self._state.get(task)
        return (PENDING, None) if got is None else (got.state, got)

    def news(self) -> list[Outcome]:
        """The outcomes since the last call (for the driver's journal)."""
        with self._lock:
            got, self._news = self._news, []
        return got

    def retry_failed(self) -> list[str]:
        """A new pass: the tasks whose image failed are prepared again; returns them."""
        with self._lock:
            failed = [t for t, o in self._state.items() if o is not None and o.state == FAILED]
            for t in failed:
                self._state[t] = None
                self._todo.put(t)
        return failed

    def close(self, wait_sec: float = 30.0) -> None:
        """No more preparations; a build in progress is ended (SIGTERM to its ``docker compose``)."""
        with self._lock:
            self._closed = True
            proc = self._proc
        self._todo.put(None)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        self._thread.join(wait_sec)

    def _started(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._proc = proc
            closed = self._closed
        if closed:
            proc.terminate()

    def _work(self) -> None:
        while True:
            task = self._todo.get()
            if task is None:
                return
            with self._lock:
                if self._closed:
                    return
            try:
                out = Outcome(task, READY, self._prepare(task, self._started))
            except Exception as exc:  # noqa: BLE001 - the pair waits for the next pass; the journal says why
                msg = str(exc).strip() or type(exc).__name__
                if not isinstance(exc, RuntimeError | OSError | ValueError):
                    msg += "\n" + traceback.format_exc()[-2000:]
                out = Outcome(task, FAILED, error=msg)
            with self._lock:
                self._proc = None
                self._state[task] = out
                self._news.append(out)
