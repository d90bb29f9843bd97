"""Forgetting: which turns a forget covers, tombstones, and scrubbing what was derived from them."""
