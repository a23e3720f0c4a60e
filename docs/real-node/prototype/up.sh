#!/bin/sh
# Real-node prototype: registry + containerd + kubelet (+ optional private API server and
# kube-proxy), pods on gpcbr0 in 198.18.0.0/24, node IP 198.19.255.254 on gpcnode0.
#   ./up.sh            standalone kubelet (static pods only)
#   ./up.sh api        also etcd + kube-apiserver (private, 127.0.0.1:15443) + kube-proxy
# Undo with ./down.sh. Run as root. Binaries come from /root/.cache/gpucloud/realnode.
set -eu
MODE=${1:-standalone}
R=/var/tmp/realnode
B=/root/.cache/gpucloud/realnode
CTRD=$B/containerd-v2.4.2
CRANE="$B/crane-v0.22.1/crane --insecure"
REG=127.0.0.1:15380
NODE_IP=198.19.255.254
cd $R
mkdir -p run logs kubelet/root kubelet/manifests kubelet/podlogs kubelet/pki kubelet/fake-sysctl \
  cni/ipam containerd/root containerd/state registry/data cdi

t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
waitfor() { # seconds, command...
  n=$1; shift; i=0
  until "$@" >/dev/null 2>&1; do i=$((i+1)); [ $i -ge $((n*5)) ] && { echo "timeout: $*"; exit 1; }; sleep 0.2; done
}

# What down.sh must restore / remove.
sysctl -n net.ipv4.ip_forward > run/ip_forward.orig
: > run/created-host-dirs
for d in /var/lib/cni /var/lib/kubelet /var/log/containers; do [ -e $d ] || echo $d >> run/created-host-dirs; done

# 1. Registry (HTTP on loopback: containerd 2.x allows plain HTTP and skips TLS checks for loopback hosts).
OTEL_TRACES_EXPORTER=none nohup $B/registry-v3.1.2/registry serve registry/config.yml > logs/registry.log 2>&1 &
echo $! > run/registry.pid
waitfor 10 curl -sf http://$REG/v2/
say "registry up on $REG"

# 2. Images: busybox (httpd) and the pause image the CRI uses for sandboxes.
if ! $CRANE manifest $REG/gpucloud/busybox:1.35 >/dev/null 2>&1; then
  tar --numeric-owner --owner=0 --group=0 -C rootfs/busybox -cf busybox-layer.tar .
  tar --numeric-owner --owner=0 --group=0 -C rootfs/pause -cf pause-layer.tar .
  $CRANE append -f busybox-layer.tar -t $REG/gpucloud/busybox:tmp >/dev/null 2>&1
  $CRANE mutate --set-platform linux/amd64 --entrypoint /bin/sh --env PATH=/bin \
    -t $REG/gpucloud/busybox:1.35 $REG/gpucloud/busybox:tmp >/dev/null 2>&1
  $CRANE append -f pause-layer.tar -t $REG/gpucloud/pause:tmp >/dev/null 2>&1
  $CRANE mutate --set-platform linux/amd64 --entrypoint /pause \
    -t $REG/gpucloud/pause:3.10 $REG/gpucloud/pause:tmp >/dev/null 2>&1
  $CRANE delete $REG/gpucloud/busybox:tmp; $CRANE delete $REG/gpucloud/pause:tmp
fi
say "images pushed"

# 3. Network: node address, pod bridge, no uplink.
ip link add gpcnode0 type bridge            # `type dummy` is refused here (no dummy module)
ip addr add $NODE_IP/32 dev gpcnode0
ip link set gpcnode0 up
ip link add gpcbr0 type bridge              # the CNI bridge plugin adopts it
ip addr add 198.18.0.1/24 dev gpcbr0
ip link set gpcbr0 up
ip route add unreachable 198.18.0.0/15      # nothing in the test range leaves through eth0
ip route add 198.19.0.0/24 dev gpcbr0 src 198.18.0.1   # service ClusterIPs (host -> service)
iptables -w -I FORWARD -i gpcbr+ ! -o gpcbr+ -j DROP
iptables -w -I FORWARD -o gpcbr+ ! -i gpcbr+ -j DROP
iptables -w -I INPUT 1 -i gpcbr+ -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
iptables -w -I INPUT 2 -i gpcbr+ -j DROP    # pods cannot reach host listeners (0.0.0.0 ones included)
say "network ready"

# 4. containerd.
PATH=$CTRD:$PATH nohup $CTRD/containerd --config containerd/config.toml > logs/containerd.log 2>&1 &
echo $! > run/containerd.pid
waitfor 20 $CTRD/ctr --address $R/run/containerd.sock version
say "containerd up"

# 5. Optional private control plane (never the stack's own).
KCFG=
KUBELET_CONFIG=config.yaml
if [ "$MODE" = api ]; then
  P=$R/api/pki
  K8S=$(ls -d /root/.cache/gpucloud/bin/kubernetes-v1.34.4-*/ | head -1)
  ETCD=$(ls -d /root/.cache/gpucloud/bin/etcd-v3.5.35-*/ | head -1)
  KUBECTL="$(ls -d /root/.cache/gpucloud/bin/kubectl-v1.34.4-*/ | head -1)kubectl --kubeconfig $R/api/admin.kubeconfig"
  mkdir -p api/etcd
  GOMAXPROCS=1 nohup nice -n 10 ${ETCD}etcd --name=realnode --data-dir=$R/api/etcd \
    --listen-client-urls=http://127.0.0.1:15379 --advertise-client-urls=http://127.0.0.1:15379 \
    --listen-peer-urls=http://127.0.0.1:15381 --initial-advertise-peer-urls=http://127.0.0.1:15381 \
    --initial-cluster=realnode=http://127.0.0.1:15381 --log-level=warn > logs/etcd.log 2>&1 &
  echo $! > run/etcd.pid
  nohup nice -n 10 ${K8S}kube-apiserver --etcd-servers=http://127.0.0.1:15379 --etcd-prefix=/realnode \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=15443 \
    --tls-cert-file=$P/apiserver.crt --tls-private-key-file=$P/apiserver.key --client-ca-file=$P/ca.crt \
    --token-auth-file=$P/tokens.csv --authorization-mode=Node,RBAC \
    --service-cluster-ip-range=198.19.0.0/24 --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file=$P/sa.pub --service-account-signing-key-file=$P/sa.key --allow-privileged=true \
    --kubelet-client-certificate=$P/kubelet-client.crt --kubelet-client-key=$P/kubelet-client.key \
    --kubelet-certificate-authority=$P/ca.crt --kubelet-preferred-address-types=InternalIP \
    --profiling=false > logs/apiserver.log 2>&1 &
  echo $! > run/apiserver.pid
  waitfor 60 $KUBECTL get --raw /readyz
  # What the controller manager would make: the default service account and the root CA map.
  $KUBECTL create serviceaccount default >/dev/null
  $KUBECTL create configmap kube-root-ca.crt --from-file=ca.crt=$P/ca.crt >/dev/null
  KCFG=$R/api/kubelet.kubeconfig
  KUBELET_CONFIG=config-api.yaml
  say "private API server ready on 127.0.0.1:15443"
fi

# 6. kubelet.
cp manifests-src/web.yaml kubelet/manifests/web.yaml
NODE_IP=$NODE_IP KUBELET_CONFIG=$KUBELET_CONFIG KUBECONFIG_FILE=$KCFG nohup ./start-kubelet.sh > logs/kubelet.log 2>&1 &
echo $! > run/kubelet.pid
waitfor 30 curl -sf http://127.0.0.1:15248/healthz
say "kubelet healthy"

if [ "$MODE" = api ]; then
  nohup $B/kubelet-v1.34.4/kube-proxy --config=api/kube-proxy.yaml > logs/kube-proxy.log 2>&1 &
  echo $! > run/kube-proxy.pid
  waitfor 30 curl -sf http://127.0.0.1:15256/healthz
  say "kube-proxy healthy"
fi

# 7. The static pod answers on its 198.18.0.x address.
podip() { ls cni/ipam/gpcbr0 2>/dev/null | grep '^198\.18\.' | head -1; }
waitfor 60 sh -c "ip=\$(ls $R/cni/ipam/gpcbr0 2>/dev/null | grep '^198' | head -1); [ -n \"\$ip\" ] && curl -sf http://\$ip:8080/"
IP=$(podip)
say "pod web at $IP: $(curl -s http://$IP:8080/)"
echo "$IP" > run/web.ip
