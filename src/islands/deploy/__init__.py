"""Deployment: one process per organisation, over gRPC with mutual TLS."""
