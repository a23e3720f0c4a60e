"""One error base class that carries its HTTP status, rendered as RFC 9457 problem+json."""

from __future__ import annotations

from typing import Any, ClassVar

PROBLEM_JSON = "application/problem+json"
PROBLEM_TYPE_BASE = "https://gpucloud.dev/problems/"


class GpucloudError(Exception):
    """Base of every error a service raises on purpose.

    `code` is the machine-readable slug clients switch on; it also forms the
    problem `type` URI. `status` is the HTTP status the error maps to.
    """

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal"
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions

    def problem(self, instance: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": PROBLEM_TYPE_BASE + self.code,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "code": self.code,
        }
        if instance:
            body["instance"] = instance
        body.update(self.extensions)
        return body


class BadRequest(GpucloudError):
    status = 400
    code = "bad_request"
    title = "Bad request"


class Unauthenticated(GpucloudError):
    status = 401
    code = "unauthenticated"
    title = "Authentication required"


class Forbidden(GpucloudError):
    status = 403
    code = "forbidden"
    title = "Forbidden"


class NotFound(GpucloudError):
    status = 404
    code = "not_found"
    title = "Not found"


class Conflict(GpucloudError):
    status = 409
    code = "conflict"
    title = "Conflict"


class TenantNotReady(Conflict):
    """A tenant event has not reached this service yet (it follows the gateway's write)."""

    code = "tenant_not_ready"
    title = "Tenant not provisioned yet"


class Gone(GpucloudError):
    """Something that existed is no longer usable: an invitation used, expired or revoked."""

    status = 410
    code = "gone"
    title = "No longer available"


class ValidationFailed(GpucloudError):
    status = 422
    code = "validation_failed"
    title = "Request validation failed"


class QuotaExceeded(GpucloudError):
    status = 422
    code = "quota_exceeded"
    title = "Quota exceeded"


class PayloadTooLarge(GpucloudError):
    status = 413
    code = "payload_too_large"
    title = "Request body too large"


class RateLimited(GpucloudError):
    status = 429
    code = "rate_limited"
    title = "Too many requests"


class DependencyUnavailable(GpucloudError):
    """A backing system (Kafka, MongoDB, Kubernetes, S3) did not answer; retrying may help."""

    status = 503
    code = "dependency_unavailable"
    title = "A dependency is unavailable"
