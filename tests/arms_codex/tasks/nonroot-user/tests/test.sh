#!/bin/bash
# reward 1 only if the agent's command ran as `worker` and its file belongs to uid 1234
f=/home/worker/proj/whoami.txt
if [ "$(cat $f 2>/dev/null)" = worker ] && [ "$(stat -c %u $f)" = 1234 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
