"""The ``marathon`` command: the top of the house, the only package that imports both the runner
and the console.

Why a package of its own: two subcommands open the console (``marathon console``, ``marathon
demo``) and the others are the runner's, so a CLI inside ``runner/`` had to import ``console/``,
a layer above it. Here the command table joins them and nothing imports back: ``runner`` and
``console`` never import ``marathon``, and a detached runner is started as a process
(``python -m marathon.cli run OUT --resume``), never imported.
"""
