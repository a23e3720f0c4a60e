#!/usr/bin/env bash
# `python -m gpucloud_agent --check` on a real GPU host (the device machine): idle, then
# with a matmul load running, so a GPU process is there to attribute. No Kafka is
# reachable from that machine, so the Kafka check is expected to fail there and show
# its fix. Needs the agent's wheels in .whl/ (docs/monitoring.md).
set -uo pipefail
PY=${PY:-/opt/torch/.venv/bin/python3}
SITE=/tmp/agent-site
"$PY" -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('$SITE') for w in sorted(glob.glob('.whl/*.whl'))]"
export PYTHONPATH="$SITE:agent:libs:." GPUCLOUD_KAFKA_BOOTSTRAP=127.0.0.1:9
# AGENT_UID=65534: as the chart runs it, a user with no capabilities, not root.
AS=()
if [ -n "${AGENT_UID:-}" ]; then
  AS=(setpriv --reuid="$AGENT_UID" --regid="$AGENT_UID" --clear-groups --inh-caps=-all)
fi
echo "--- idle"
timeout 60 "${AS[@]}" "$PY" -m gpucloud_agent --check; echo "exit $?"
"$PY" - <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda"); end = time.time() + 30
while time.time() < end:
    a @ a; torch.cuda.synchronize()
PY
LOAD=$!
sleep 10
echo "--- under a matmul load"
timeout 60 "${AS[@]}" "$PY" -m gpucloud_agent --check; echo "exit $?"
wait $LOAD
