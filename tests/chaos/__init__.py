"""Fault suite: history recorder and checker, nemeses, and the reliability scenarios."""
