"""The harness version, recorded in every envelope."""

__version__ = "0.1.0"
