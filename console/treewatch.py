"""The console's file watcher, run in a child process that streams what changed over a pipe.

watchfiles sets up its inotify watches in one call that holds the GIL: on a 10,050-trial tree
(80,000-90,000 dirs) that froze the console's screen and keys for 5-6 s right after its first grid
(docs/benchmarks.md). In a child process the setup costs the console nothing; the console's
thread waits on the pipe, which releases the GIL.

The child (``python -m console.treewatch``) reads its settings as one JSON line on stdin and writes
one JSON line per batch of changes: ``[[change, path], ...]`` (``[]`` when ``timeout_ms`` passed with
none, so the reader can look at its stop event), or ``{"error": "..."}`` before it exits when the
watch cannot be set up (the inotify limit: the console falls back to polling). It ends when its
stdin closes (the console stopped it, or died).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class WatchSettings:
    roots: list[str]
    debounce_ms: int
    step_ms: int
    timeout_ms: int
    force_polling: bool
    poll_delay_ms: int


def watch(settings: WatchSettings, stop: threading.Event) -> Iterator[set[tuple[int, str]] | None]:
    """Batches of ``(change, path)`` as watchfiles' ``watch`` yields them (an empty set on each
    ``timeout_ms`` without a change), until ``stop`` is set; None when changes were lost (a file
    name watchfiles cannot report, such as one that is not UTF-8: an agent can make one), so the
    reader rescans. Raises OSError when the child could not watch the roots. The child is this
    process's own (ended by its PID's handle, never by name)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "console.treewatch"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    done = threading.Event()

    def stopper() -> None:  # a stop ends the child now, not at its next timeout's line
        while not (stop.wait(0.1) or done.is_set()):
            pass
        if stop.is_set():
            proc.terminate()

    stopping = threading.Thread(target=stopper, daemon=True, name="treewatch-stop")
    stopping.start()
    try:
        proc.stdin.write((json.dumps(asdict(settings)) + "\n").encode())
        proc.stdin.flush()
        for line in proc.stdout:
            if stop.is_set():
                return
            got = json.loads(line)
            if isinstance(got, dict):
                if "lost" in got:
                    yield None
                    continue
                raise OSError(str(got.get("error", "the watcher failed")))
            yield {(int(c), str(p)) for c, p in got}
        if not stop.is_set():
            raise OSError(f"the watcher process ended (exit status {proc.wait()})")
    finally:
        done.set()
        stopping.join()  # (it signals no child this thread may have reaped by then)
        for end in (proc.stdin, proc.stdout):
            try:
                end.close()
            except OSError:
                pass
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _child() -> int:
    from watchfiles import watch as wf_watch

    s = WatchSettings(**json.loads(sys.stdin.readline()))
    gone = threading.Event()

    def orphaned() -> None:  # stdin at its end: the console stopped us or died
        sys.stdin.read()
        gone.set()

    threading.Thread(target=orphaned, daemon=True).start()

    def say(got: object) -> None:
        sys.stdout.write(json.dumps(got) + "\n")
        sys.stdout.flush()

    while not gone.is_set():
        try:
            for changes in wf_watch(
                *s.roots, watch_filter=None, debounce=s.debounce_ms, step=s.step_ms, stop_event=gone,
                rust_timeout=s.timeout_ms, yield_on_timeout=True, force_polling=s.force_polling or None,
                poll_delay_ms=s.poll_delay_ms, ignore_permission_denied=True, raise_interrupt=False,
            ):  # fmt: skip
                say([[int(c), p] for c, p in changes])
        except BrokenPipeError:  # the console is gone
            return 0
        except OSError as exc:
            say({"error": f"{type(exc).__name__}: {exc}"})
            return 3
        except RuntimeError as exc:  # watchfiles could not report a change (a name not UTF-8):
            say({"lost": type(exc).__name__})  # the console rescans; watch again
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_child())
    except (BrokenPipeError, KeyboardInterrupt):
        os._exit(0)
