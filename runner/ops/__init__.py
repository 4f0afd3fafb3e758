"""Everything that changes the machine: the Docker API and address pool, cleanup by exact label,
the PID registry, kill, and voiding a trial. Built on ``runner.results``; never imports
``runner.schedule``.
"""
