"""The model gateway: the one process per Docker host that holds the real model key, serves each
attempt on its own socket with a per-attempt token, forwards the Responses API as it streams, and
writes every call to the ledger (``runner.results.ledger``). ``attempts``: the runner's side (issue,
end); ``server``: the process; ``process``: start, register, watch, restart; ``wire``: what is read
off the wire.
"""
