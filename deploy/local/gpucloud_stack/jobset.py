"""The JobSet controller's configuration and webhooks, as the native stack and the
compose file both install them (`compose_jobset.py`): one definition, two callers."""

from __future__ import annotations

#: (name, path, resource, operations) of each webhook, by configuration kind: JobSet's
#: own (config/components/webhook/manifests.yaml), reached by URL, not by Service.
WEBHOOKS = {
    "MutatingWebhookConfiguration": [
        ("mjobset.kb.io", "/mutate-jobset-x-k8s-io-v1alpha2-jobset", "jobsets", ["CREATE"]),
        ("mpod.kb.io", "/mutate--v1-pod", "pods", ["CREATE"]),
    ],
    "ValidatingWebhookConfiguration": [
        (
            "vjobset.kb.io",
            "/validate-jobset-x-k8s-io-v1alpha2-jobset",
            "jobsets",
            ["CREATE", "UPDATE"],
        ),
        ("vpod.kb.io", "/validate--v1-pod", "pods", ["CREATE"]),
    ],
}
#: The controller's CRD, in the module at its version (what the native stack reads).
CRD_FILE = "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"


def controller_config(*, webhook_host: str, webhook_port: int, certs: str, health: str) -> str:
    """The controller's configuration file: one replica, no leader election, the
    webhook serving the certificate in `certs`, no metrics listener."""
    return (
        "apiVersion: config.jobset.x-k8s.io/v1alpha1\n"
        "kind: Configuration\n"
        "leaderElection: {leaderElect: false}\n"
        f"health: {{healthProbeBindAddress: '{health}'}}\n"
        "metrics: {bindAddress: '0'}\n"
        f"webhook: {{host: '{webhook_host}', port: {webhook_port}, certDir: '{certs}'}}\n"
        "internalCertManagement: {enable: false}\n"
    )


def webhook_configurations(base_url: str, ca_bundle: str) -> list[tuple[str, dict[str, object]]]:
    """(API path, object) of each webhook configuration, calling the controller at
    `base_url` and trusting `ca_bundle` (base64 PEM)."""
    configurations: list[tuple[str, dict[str, object]]] = []
    for kind, hooks in WEBHOOKS.items():
        manifest: dict[str, object] = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": "gpucloud-jobset"},
            "webhooks": [_webhook(*hook, base_url, ca_bundle) for hook in hooks],
        }
        plural = kind.lower() + "s"
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}/gpucloud-jobset"
        configurations.append((path, manifest))
    return configurations


def _webhook(
    name: str, path: str, resource: str, operations: list[str], base_url: str, ca_bundle: str
) -> dict[str, object]:
    jobsets = resource == "jobsets"
    hook: dict[str, object] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": f"{base_url}{path}", "caBundle": ca_bundle},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [{
            "apiGroups": ["jobset.x-k8s.io" if jobsets else ""],
            "apiVersions": ["v1alpha2" if jobsets else "v1"],
            "operations": operations,
            "resources": [resource],
        }],
    }  # fmt: skip
    if not jobsets:  # the pod hooks see JobSet's pods only, as its own kustomization has it
        hook["objectSelector"] = {
            "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]
        }
    return hook
