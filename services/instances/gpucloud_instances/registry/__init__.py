"""Tenants' private registry credentials and the pull secrets made of them."""
