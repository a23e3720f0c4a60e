"""What each tenant's namespace is made of: a quota that counts GPUs and pods, defaults
that let it count containers that state nothing, a network policy that denies the
platform both ways, and role bindings that name one subject each."""

from __future__ import annotations

from gpucloud_instances.tenancy import manifests

PRIVATE = ["10.0.0.0/8", "169.254.0.0/16", "127.0.0.0/8", "fc00::/7", "::1/128"]


def test_the_quota_counts_gpus_and_a_pod_per_share_of_a_gpu_beyond_the_instances() -> None:
    """A GPU of quota may stand for 64 pods (time-sliced replicas, or seven MIG slices):
    a job of seven 1g slices holds one GPU of quota and runs all seven pods."""
    quota = manifests.resource_quota("gpc-acme", gpus=4, instances=2, cpu="32", memory="256Gi")
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "4", "requests.cpu": "32", "requests.memory": "256Gi",
        "pods": str(2 + 4 * 64),
    }  # fmt: skip


def test_a_container_that_states_no_resources_is_still_counted() -> None:
    [limits] = manifests.limit_range("gpc-acme")["spec"]["limits"]
    assert limits["defaultRequest"] == {"cpu": "500m", "memory": "1Gi"}


def test_a_tenants_pods_take_in_only_the_gateway_and_their_own() -> None:
    policy = manifests.network_policy(
        "gpc-acme", gateway_namespace="gpucloud", dns_namespace="kube-system",
        denied_cidrs=PRIVATE,
    )  # fmt: skip
    spec = policy["spec"]
    assert spec["podSelector"] == {}  # every pod of the namespace
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    [ingress] = spec["ingress"]
    gateway, own = ingress["from"]
    assert gateway == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gpucloud"}}
    }
    assert own == {"podSelector": {}}


def test_a_tenants_pods_reach_dns_their_own_and_the_internet_but_no_private_range() -> None:
    policy = manifests.network_policy(
        "gpc-acme", gateway_namespace="gpucloud", dns_namespace="kube-system",
        denied_cidrs=PRIVATE,
    )  # fmt: skip
    own, dns, public = policy["spec"]["egress"]
    assert own == {"to": [{"podSelector": {}}]}
    assert {port["port"] for port in dns["ports"]} == {53}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    v4, v6 = (block["ipBlock"] for block in public["to"])
    assert v4 == {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "169.254.0.0/16", "127.0.0.0/8"]}
    assert v6 == {"cidr": "::/0", "except": ["fc00::/7", "::1/128"]}


def test_a_role_binding_names_one_subject_user_or_service_account() -> None:
    account = manifests.role_binding("gpc-acme", "gpucloud-tenant-storage",
                                     "ServiceAccount:gpucloud:gpucloud-storage")  # fmt: skip
    assert account["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpucloud-storage", "namespace": "gpucloud"}
    ]
    assert account["roleRef"]["name"] == "gpucloud-tenant-storage"
    assert account["metadata"]["namespace"] == "gpc-acme"
    user = manifests.role_binding("gpc-acme", "view", "User:alice")
    assert user["subjects"] == [
        {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}
    ]
