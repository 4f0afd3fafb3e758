"""The scripted Responses-API model (tests and `marathon demo`): server, image, scenarios.

Where it listens and logs inside every mini-benchmark container (``server.py`` defaults to the
same; it runs inside the image on its own and imports nothing of ours).
"""

#: The scripted model listens here inside every mini-benchmark container.
SCRIPTED_BASE_URL = "http://127.0.0.1:18080/v1"
#: Its request log (kept as evidence in ``agent/scripted-model/``).
SCRIPTED_LOG = "/var/log/scripted/requests.jsonl"
