"""Tenants as the gateway publishes them, and each tenant's namespace."""
