"""``ray start`` with a longer wait for its raylet to register: ``python ray_node.py start ...``.

Why: ``ray start`` gives its raylet a fixed budget to register with the control store
(ray/_private/node.py: 30 s, then one more 30 s lookup), not configurable. On this 2-core machine
under other suites' load (load average 40 was seen) registration took longer, and the node exited.
This runs Ray's own CLI unchanged, with the lookup it waits on (``services.get_node``) retried until
``MARATHON_RAY_REGISTER_SEC`` (default 600) -- a startup budget, nothing of Ray's behaviour.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    import ray._private.services as services
    from ray.scripts.scripts import main as ray_main

    budget = float(os.environ.get("MARATHON_RAY_REGISTER_SEC", "600"))
    lookup = services.get_node

    def get_node(gcs_address, node_id):
        deadline = time.monotonic() + budget
        while True:
            try:
                return lookup(gcs_address, node_id)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise

    services.get_node = get_node
    sys.argv = ["ray", *sys.argv[1:]]
    return ray_main()


if __name__ == "__main__":
    sys.exit(main())
