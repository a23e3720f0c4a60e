#!/bin/sh
# Undoes up.sh: pods, kube-proxy rules, kubelet, containerd (tasks, shims, mounts), API server,
# etcd, registry, bridges, routes, iptables rules and nft tables, sysctl, cgroups, host dirs.
set -u
R=/var/tmp/realnode
B=/root/.cache/gpucloud/realnode
CTR="$B/containerd-v2.4.2/ctr --address $R/run/containerd.sock"
cd $R

stop() { # name [seconds]
  f=run/$1.pid; [ -f $f ] || return 0
  pid=$(cat $f); kill "$pid" 2>/dev/null
  i=0; while kill -0 "$pid" 2>/dev/null; do
    i=$((i+1)); [ $i -ge $(( ${2:-15} * 5 )) ] && { kill -9 "$pid" 2>/dev/null; break; }; sleep 0.2
  done
  rm -f $f
}

# 1. Pods: the kubelet stops them (CNI DEL releases veths and addresses).
rm -f kubelet/manifests/*.yaml
if [ -f run/apiserver.pid ]; then
  KUBECTL="$(ls -d /root/.cache/gpucloud/bin/kubectl-v1.34.4-*/ | head -1)kubectl --kubeconfig $R/api/admin.kubeconfig"
  $KUBECTL delete pods --all --grace-period=1 --wait=false >/dev/null 2>&1
fi
i=0; while ip -o link show type veth 2>/dev/null | grep -q 'master gpcbr0' && [ $i -lt 60 ]; do i=$((i+1)); sleep 0.5; done

# 2. kube-proxy and its rules (--cleanup leaves KUBE-FIREWALL behind).
if [ -f run/kube-proxy.pid ]; then
  stop kube-proxy
  $B/kubelet-v1.34.4/kube-proxy --cleanup > logs/kube-proxy-cleanup.log 2>&1
  for t in iptables ip6tables; do
    $t -w -D INPUT -j KUBE-FIREWALL 2>/dev/null; $t -w -D OUTPUT -j KUBE-FIREWALL 2>/dev/null
    $t -w -F KUBE-FIREWALL 2>/dev/null; $t -w -X KUBE-FIREWALL 2>/dev/null
  done
fi

# 3. kubelet, then whatever containerd still runs, then containerd.
stop kubelet
for ns in $($CTR namespaces ls -q 2>/dev/null); do
  for t in $($CTR -n $ns tasks ls -q 2>/dev/null); do $CTR -n $ns tasks kill -s SIGKILL $t >/dev/null 2>&1; done
  sleep 1
  for t in $($CTR -n $ns tasks ls -q 2>/dev/null); do $CTR -n $ns tasks rm -f $t >/dev/null 2>&1; done
  for c in $($CTR -n $ns containers ls -q 2>/dev/null); do $CTR -n $ns containers rm $c >/dev/null 2>&1; done
done
stop containerd
# Shims of this containerd only (they name its socket on their command line).
for p in $(grep -l "$R/run/containerd.sock" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do kill -9 "$p" 2>/dev/null; done

# 4. Control plane (API server before etcd, or it hangs on shutdown), registry.
stop apiserver 30
stop etcd
stop registry
stop registry-tls

# 5. Mounts under the scratch dir (overlay rootfs, shm, netns, kubelet tmpfs volumes, root bind).
grep " $R" /proc/self/mounts | awk '{print $2}' | sort -r | while read m; do umount -l "$m"; done

# 6. Network.
ip link del gpcbr0 2>/dev/null
ip link del gpcnode0 2>/dev/null
ip route del unreachable 198.18.0.0/15 2>/dev/null
iptables -w -D INPUT -i gpcbr+ -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT 2>/dev/null
iptables -w -D INPUT -i gpcbr+ -j DROP 2>/dev/null
iptables -w -D FORWARD -i gpcbr+ ! -o gpcbr+ -j DROP 2>/dev/null
iptables -w -D FORWARD -o gpcbr+ ! -i gpcbr+ -j DROP 2>/dev/null
# iptables-nft leaves empty tables; drop them only while they hold no rule.
if command -v nft >/dev/null && [ "$( (iptables-save; ip6tables-save) | grep -cE '^-A|^:[A-Z0-9-]+ - ')" = 0 ]; then
  for t in "ip filter" "ip nat" "ip mangle" "ip6 filter" "ip6 nat" "ip6 mangle"; do nft delete table $t 2>/dev/null; done
fi
conntrack -D -s 198.18.0.0/15 >/dev/null 2>&1; conntrack -D -d 198.18.0.0/15 >/dev/null 2>&1
[ -f run/ip_forward.orig ] && sysctl -qw net.ipv4.ip_forward=$(cat run/ip_forward.orig)

# 7. cgroups (deepest first), host dirs the kubelet/CNI create outside --root-dir, data.
for c in /sys/fs/cgroup/*/; do
  for top in gpcnode realnode; do [ -d $c$top ] && find $c$top -depth -type d -exec rmdir {} \; 2>/dev/null; done
done
[ -f run/created-host-dirs ] && xargs -r rm -rf < run/created-host-dirs
rm -rf containerd/root containerd/state containerd/runc api/etcd cni/ipam registry/data registry/data-tls
rm -rf kubelet/root kubelet/podlogs kubelet/pki run/fifo
rm -f run/*.pid run/ip_forward.orig run/created-host-dirs run/web.ip run/containerd.sock run/containerd.sock.ttrpc
echo "down: done"
