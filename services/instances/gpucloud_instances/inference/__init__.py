"""Inference services: replicas behind one endpoint, scaled, rolled out and back."""
