"""Typed settings from the environment (prefix GPUCLOUD_); one subclass per service."""

from __future__ import annotations

from typing import Self

from pydantic import Field, IPvAnyNetwork, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from .egress import EgressPolicy, require_loopback_endpoints
from .kafka_connection import KafkaConnection, SaslMechanism


class ServiceSettings(BaseSettings):
    """What every service needs: its listener, Kafka, MongoDB, telemetry and identity."""

    model_config = SettingsConfigDict(env_prefix="GPUCLOUD_", extra="ignore")

    service_name: str = "gpucloud"
    http_host: str = "127.0.0.1"
    http_port: int = 8000
    log_level: str = "INFO"

    kafka_bootstrap: str = "127.0.0.1:9092"
    #: The service's own Kafka principal (docs/kafka.md); unset: no authentication.
    kafka_username: str | None = None
    kafka_password: SecretStr = Field(default=SecretStr(""))
    kafka_sasl_mechanism: SaslMechanism = "SCRAM-SHA-256"
    mongodb_uri: str = "mongodb://127.0.0.1:27017/"
    #: Database name; defaults to `gpucloud_<service>` so services never share one.
    mongodb_database: str | None = None

    #: OTLP/HTTP collector base URL, e.g. http://127.0.0.1:4318. Unset: no export.
    otlp_endpoint: str | None = None

    #: Request bodies above this are refused with a 413 before they are read. The
    #: API's bodies are small JSON; data goes to storage through presigned URLs.
    max_body_bytes: int = Field(default=2**20, ge=1024)

    #: The Ed25519 public keys of the signers this service trusts, by signer:
    #: JSON such as {"gateway": "<base64url>", "instances": "<base64url>"}.
    identity_public_keys: dict[str, str] = Field(default_factory=dict)
    #: This service's own Ed25519 private key; only signers (the gateway, and the
    #: instances service for its calls to storage) have one.
    identity_private_key: SecretStr = Field(default=SecretStr(""))

    #: Dial loopback alone (127.0.0.0/8, ::1): set by the local stack, whose pods,
    #: webhook receivers and servers all live on this machine (egress.py). Off in
    #: the Helm chart. Checked at start against the configured endpoints, and on
    #: every connection a service makes on a user's behalf.
    loopback_only: bool = False
    #: Networks (CIDRs) where registered clusters' API servers may be, beside global
    #: addresses: real clusters sit on private ranges, which a registered kubeconfig
    #: may otherwise not name (review N2). Read by the instances and storage services.
    cluster_api_networks: list[IPvAnyNetwork] = Field(default_factory=list)

    @model_validator(mode="after")
    def _endpoints_on_loopback(self) -> Self:
        if self.loopback_only:
            require_loopback_endpoints(self.dialed_endpoints())
        return self

    def dialed_endpoints(self) -> dict[str, str]:
        """The endpoints this service dials, by setting; a service adds its own."""
        endpoints = {"kafka_bootstrap": self.kafka_bootstrap, "mongodb_uri": self.mongodb_uri}
        if self.otlp_endpoint:
            endpoints["otlp_endpoint"] = self.otlp_endpoint
        return endpoints

    @property
    def egress(self) -> EgressPolicy:
        return EgressPolicy(loopback_only=self.loopback_only)

    @property
    def kafka(self) -> KafkaConnection:
        return KafkaConnection(
            self.kafka_bootstrap,
            username=self.kafka_username,
            password=self.kafka_password.get_secret_value(),
            mechanism=self.kafka_sasl_mechanism,
        )

    @property
    def database_name(self) -> str:
        return self.mongodb_database or f"gpucloud_{self.service_name}"
