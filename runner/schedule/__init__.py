"""The driver and what it needs to decide what runs when: claims, the one-runner lock, the
configuration, the breaker, preflight, progress, prebuild and health. Built on ``runner.ops`` and
``runner.results``.
"""
