#!/bin/bash
# reward 1 only if the agent's commands ran in /srv/work (relative paths landed there)
if [ "$(cat /srv/work/answer.txt 2>/dev/null)" = here ] && [ "$(cat /srv/work/where.txt 2>/dev/null)" = /srv/work ] && [ ! -e /app/answer.txt ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
