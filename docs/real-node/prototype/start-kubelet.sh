#!/bin/sh
# Starts the kubelet of the real-node prototype. Run as root.
#   NODE_IP         node IP and kubelet listen address (default 127.0.0.1: works standalone,
#                   but the kubelet then publishes no node addresses; use 198.19.255.254 on gpcnode0)
#   KUBELET_CONFIG  file under kubelet/ (default config.yaml: standalone; config-api.yaml: registered)
#   KUBECONFIG_FILE kubeconfig to register with an API server (unset: standalone)
set -eu
R=/var/tmp/realnode
K=$R/kubelet
KUBELET=/root/.cache/gpucloud/realnode/kubelet-v1.34.4/kubelet
NODE_IP=${NODE_IP:-127.0.0.1}
CONFIG=$K/${KUBELET_CONFIG:-config.yaml}
KCFG=${KUBECONFIG_FILE:+--kubeconfig=$KUBECONFIG_FILE}

# 1. cgroup v1 root for the node (cgroupRoot must exist); cpuset needs cpus/mems.
for c in blkio cpu cpuacct cpuset devices freezer memory pids systemd; do
  mkdir -p /sys/fs/cgroup/$c/gpcnode
done
cat /sys/fs/cgroup/cpuset/cpuset.cpus > /sys/fs/cgroup/cpuset/gpcnode/cpuset.cpus
cat /sys/fs/cgroup/cpuset/cpuset.mems > /sys/fs/cgroup/cpuset/gpcnode/cpuset.mems

# 2. The kubelet's root dir as a shared mount, so that volume mounts the kubelet makes
#    in its own mount namespace are seen by containerd/runc.
if ! mountpoint -q $K/root; then
  mount --bind $K/root $K/root
  mount --make-shared $K/root
fi

# 3. The values the kubelet insists on (protectKernelDefaults: true), shown to it alone.
printf '1\n' > $K/fake-sysctl/overcommit_memory
printf '10\n' > $K/fake-sysctl/panic
printf '1\n' > $K/fake-sysctl/panic_on_oops

exec unshare --mount --propagation unchanged sh -c '
  K=/var/tmp/realnode/kubelet
  mount --bind $K/fake-sysctl/overcommit_memory /proc/sys/vm/overcommit_memory
  mount --bind $K/fake-sysctl/panic /proc/sys/kernel/panic
  mount --bind $K/fake-sysctl/panic_on_oops /proc/sys/kernel/panic_on_oops
  exec "$@"' kubelet "$KUBELET" \
    --config="$CONFIG" $KCFG \
    --root-dir=$K/root \
    --cert-dir=$K/pki \
    --node-ip="$NODE_IP" \
    --address="$NODE_IP" \
    --hostname-override=gpc-realnode-0 \
    --v=2
