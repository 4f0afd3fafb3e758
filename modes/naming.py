"""Names the runner and the agents must spell identically, so they live below both.

The runner finds a trial's Docker objects by the Compose project harbor gives it, and the codex arms
report a lost sandbox with a fixed phrase the runner's voiding table matches. Both sides import these
from here (``agents/`` never imports ``runner/``).
"""

from __future__ import annotations

import re

#: what the codex arms say when the trial's container stopped or its engine went away under the
#: agent (agents.transport.EnvironmentLost): the agent's failure is then the sandbox's, not the arm's
ENVIRONMENT_LOST = "trial environment lost"


def compose_project(trial_name: str) -> str:
    """The Docker Compose project harbor 0.25.0 gives a trial's environment.

    harbor: session_id = f"{trial_name}__env", then
    ``environments/docker/docker.py:_sanitize_docker_compose_project_name``: lowercase, prefix "0"
    when the first char is not [a-z0-9], every char outside [a-z0-9_-] becomes "-".
    This is the one place marathon derives it; "is this project ours" compares against it exactly.
    """
    name = f"{trial_name}__env".lower()
    if not re.match(r"^[a-z0-9]", name):
        name = "0" + name
    return re.sub(r"[^a-z0-9_-]", "-", name)
