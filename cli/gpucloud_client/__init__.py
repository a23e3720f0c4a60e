"""The typed Python client of the gpucloud API, which the `gpucloud` command is built on."""

from .client import Client
from .errors import ApiError, ClientError, TransferFailed, Unreachable
from .transfers import Transfers

__all__ = ["ApiError", "Client", "ClientError", "TransferFailed", "Transfers", "Unreachable"]
