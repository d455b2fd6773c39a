"""Orchestration behind each command: one module per command, each exposing the function the library API re-exports and its typed result."""
