"""Validation against measured iteration times: CSV parsing, per-row workloads, error metrics."""
