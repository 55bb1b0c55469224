"""Containerfiles, entrypoint and reference agent for the Podman sandbox (package data)."""
