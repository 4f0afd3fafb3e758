"""The leaf every layer may import: runner, console and agents all build on it, it imports none of them.

It holds what both sides of a boundary must agree on -- the arms' profiles (``modes.profiles``), the
names harbor and the agents share with the runner (``modes.naming``), the content digest of a
Docker image that receipts and the runner's image records both name (``modes.image_digest``) and
the safe reader of hostile agent-written files (``modes.safeio``) -- and nothing of ours besides.
"""
