"""Which launcher a run's attempts get: the one place that tells a cluster run from a one-host run.

``marathon run --cluster ADDR`` (``MARATHON_CLUSTER`` in ``.driver_env``) runs every attempt as a
Ray job (``runner.schedule.fleet.launch``); any other run starts ``harbor run`` on this host
(``runner.schedule.local``). Chosen once, when the run starts; the driver only ever sees a
``runner.schedule.attempt.Launcher``.
"""

from __future__ import annotations

from runner.results.events import EventLog
from runner.schedule.attempt import Launcher
from runner.schedule.config import ArmSpec, RunConfig
from runner.schedule.lock import Holder


def launcher_for(
    cfg: RunConfig,
    log: EventLog,
    holder: Holder,
    specs: dict[str, ArmSpec],
    mounts: dict[str, str | None],
    *,
    gate_recheck_sec: float = 2.0,
) -> Launcher:
    """The run's launcher; connecting to a cluster happens here, before the tree is touched."""
    if cfg.cluster:
        from runner.schedule.fleet.launch import RayLauncher  # Ray is imported only for a cluster run

        return RayLauncher(cfg, log, holder, specs)
    from runner.schedule.local import LocalLauncher

    return LocalLauncher(cfg, log, holder, specs, mounts, gate_recheck_sec=gate_recheck_sec)
