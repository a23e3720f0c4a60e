"""How a client reaches Kafka: the bootstrap address and the principal it signs in as."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from faststream.kafka.security import parse_security
from faststream.security import BaseSecurity, SASLPlaintext, SASLScram256

SaslMechanism = Literal["SCRAM-SHA-256", "PLAIN"]


@dataclass(frozen=True)
class KafkaConnection:
    """Where Kafka is and who we are to it. Services authenticate with SCRAM as their
    own principal; PLAIN is only for the operator's admin principal (docs/kafka.md).
    Without a username the connection is unauthenticated (a broker with no SASL)."""

    bootstrap: str
    username: str | None = None
    password: str = field(default="", repr=False)
    mechanism: SaslMechanism = "SCRAM-SHA-256"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KafkaConnection:
        """From the GPUCLOUD_KAFKA_* settings, as `make env` prints them."""
        mechanism: SaslMechanism = (
            "PLAIN" if env.get("GPUCLOUD_KAFKA_SASL_MECHANISM") == "PLAIN" else "SCRAM-SHA-256"
        )
        return cls(
            env.get("GPUCLOUD_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
            username=env.get("GPUCLOUD_KAFKA_USERNAME"),
            password=env.get("GPUCLOUD_KAFKA_PASSWORD", ""),
            mechanism=mechanism,
        )

    def security(self) -> BaseSecurity | None:
        if self.username is None:
            return None
        if self.mechanism == "PLAIN":
            return SASLPlaintext(self.username, self.password)
        return SASLScram256(self.username, self.password)

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for an aiokafka client (producer, consumer, admin)."""
        return {"bootstrap_servers": self.bootstrap, **parse_security(self.security())}
