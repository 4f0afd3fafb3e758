"""One run over many Docker hosts on a Ray cluster (``marathon run --cluster``).

Why: a five-arm run outgrows one server, and the teams that run it own a few Docker hosts joined in
a Ray cluster, not a cloud sandbox account. Each host declares its capacity as the Ray custom
resource ``docker_slots`` when it joins; the runner submits one Ray job per (task, arm) attempt
(``submission_id`` = the attempt id), the job runs on the host Ray picked -- that host's pool gate,
``harbor run`` against that host's engine, into the shared output tree -- and records where it ran
in ``host.json``. Claims on the shared tree still say which pairs are being worked on; Ray decides
where.
"""
