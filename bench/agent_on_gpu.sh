#!/usr/bin/env bash
# The node agent on a real GPU (the device machine): NVML's answers through the agent
# (`--once`), then the sample cost idle and under a matmul load, each beside the reads
# the sample path no longer makes. Needs the agent's wheels in .whl/ (docs/monitoring.md).
set -euo pipefail
PY=${PY:-/opt/torch/.venv/bin/python3}
SITE=/tmp/agent-site
"$PY" -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('$SITE') for w in sorted(glob.glob('.whl/*.whl'))]"
export PYTHONPATH="$SITE:agent:libs:."
nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv,noheader
echo "--- agent --once (inventory and three samples; abridged)"
timeout 60 "$PY" -m gpucloud_agent --once > /tmp/once.json
"$PY" - <<'PY'
import json
once = json.load(open("/tmp/once.json"))
gpu = once["inventory"][0]
print({k: gpu[k] for k in ("name", "memory_total_mib", "driver_version", "cuda_version", "mig_mode")})
for round_ in once["samples"]:
    s = round_[0]
    print({k: s[k] for k in ("utilization_gpu_pct", "power_w", "pcie_tx_kibps", "pcie_rx_kibps", "sm_clock_mhz")})
PY
echo "--- idle"
"$PY" -m bench.agent_sample --nvml --samples 300
echo "--- under a matmul load"
"$PY" - <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda"); end = time.time() + 45
while time.time() < end:
    b = (a @ a).cpu() if int(time.time()) % 3 == 0 else a @ a  # some PCIe traffic too
    torch.cuda.synchronize()
PY
LOAD=$!
sleep 8
"$PY" -m bench.agent_sample --nvml --samples 300
timeout 30 "$PY" -m gpucloud_agent --once > /tmp/once.json
"$PY" -c "import json; s=json.load(open('/tmp/once.json'))['samples']; print([(r[0]['utilization_gpu_pct'], r[0]['pcie_tx_kibps'], r[0]['pcie_rx_kibps']) for r in s])"
wait $LOAD
