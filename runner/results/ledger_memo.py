"""The ledger's sums kept between processes: a warm `marathon status` reads only what is new.

Why: a multi-day run's ledger holds hundreds of thousands of calls (150,000 lines are 120 MB); adding
them up again costs every `marathon status` and `report` seconds of CPU (2.3 s for 150,000 on the
reference machine) for sums that changed by a few lines. So the scan keeps, in the tree's index
(``runner.results.index``: the owner's, trusted by the same rules), the sums (``Ledger.to_state``)
with where the reader stopped in each ledger file: its inode, the offset, and the sha256 of every
byte before it.

Why they can never be stale: the gateway only appends to its ledger, and the sums are taken back
only when each file is still that inode, at least that long, and its first bytes hash to the same
sha256 (a hash of 120 MB costs a tenth of a second; reading them costs twenty times that); then
only the bytes after the offset are read. A file replaced, truncated, edited or gone, another
version of the readers or of LiteLLM's cost map (``fingerprint``): the ledger is read from its start.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from runner.results import index
from runner.results.ledger import Ledger, LedgerReader
from runner.results.tree import ledger_paths

KEY = "ledger"


def fingerprint() -> str:
    """What the sums depend on besides the ledger: the code that reads and adds it up, and the
    cost map whose prompt-size tiers key its tokens (``modes.cost_map``)."""
    from modes import cost_map, safeio, values
    from runner.results import ledger

    h = hashlib.sha256(b"marathon-ledger-memo-1")
    for mod in (ledger, cost_map, values, safeio):
        with open(mod.__file__, "rb") as fh:  # type: ignore[arg-type]
            h.update(fh.read())
    h.update(str(cost_map.identity().sha256).encode())
    h.update(f"json-cap={safeio.JSON_CAP}".encode())  # (the readers' size cap: as the scan index's)
    return h.hexdigest()


def restore(out: Path | str, reader: LedgerReader) -> tuple[Ledger, str] | None:
    """The sums kept for this tree and the reader moved to where they were taken (its next look
    reads only what came after), with the kept state's text; None when there are none to trust."""
    if not ledger_paths(Path(out)):
        return None  # no ledger (a tree without a gateway): the index is not even opened
    text = index.read_memo(os.fspath(out), KEY)
    if text is None:
        return None
    try:
        d = json.loads(text)
        if d.get("fp") != fingerprint():
            return None
        led = Ledger.from_state(d["ledger"])
        skipped = int(d["skipped"])
        files = d["files"]
        if not isinstance(files, dict):
            return None
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if not reader.resume(files):
        return None
    reader.skipped = skipped
    return led, _where(files)


def store(out: Path | str, reader: LedgerReader, ledger: Ledger, was: str | None) -> None:
    """Keep the sums and where ``reader`` is (when it moved since ``was``, what ``restore`` gave)."""
    files = reader.state()
    if not files or _where(files) == was:
        return
    text = json.dumps(
        {"fp": fingerprint(), "files": files, "skipped": reader.skipped, "ledger": ledger.to_state()},
        separators=(",", ":"),
    )
    index.write_memo(os.fspath(out), KEY, text)


def _where(files: dict) -> str:
    return json.dumps(files, sort_keys=True)
