"""Record the engine's container events for a ``docker kill`` and a ``docker stop`` of a compose-
labelled main container (run once on a real engine; tests/core/test_voiding.py reads the result).

    python tests/data/record_engine_events.py > tests/data/engine-events.json
"""

from __future__ import annotations

import json
import subprocess
import time

import docker

KEEP = ("com.docker.compose.project", "com.docker.compose.service", "exitCode", "signal", "image")


def run(project: str, how: list[str]) -> None:
    cid = subprocess.run(
        ["docker", "run", "-d", "--label", f"com.docker.compose.project={project}",
         "--label", "com.docker.compose.service=main", "marathon-base:bookworm", "sleep", "infinity"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    time.sleep(0.5)
    subprocess.run(["docker", *how, cid], capture_output=True, check=True)
    time.sleep(0.5)
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=True)  # ours, by exact id


def main() -> None:
    client = docker.from_env()
    since = int(time.time())
    run("recorded-kill", ["kill"])
    run("recorded-stop", ["stop", "-t", "1"])
    flt = {
        "type": "container",
        "event": ["kill", "die", "stop", "oom"],
        "label": ["com.docker.compose.project"],
    }
    events = []
    for e in client.events(since=since, until=int(time.time()) + 1, decode=True, filters=flt):
        attrs = e["Actor"]["Attributes"]
        e["Actor"]["Attributes"] = {k: v for k, v in attrs.items() if k in KEEP}
        events.append(e)
    print(json.dumps(events, indent=1))


if __name__ == "__main__":
    main()
