#!/bin/sh
# Start the scripted model in the background, then run the container's command.
python3 /opt/scripted/server.py >/var/log/scripted/server.log 2>&1 &
exec "$@"
