"""Chat-platform payloads (Slack, Discord, OpenAI message lists, Telegram) mapped to memstream
turns and removals: pure functions for the ingest CLI and the HTTP gateway, no I/O, no Kafka."""

from .base import FORMATS, Mapped, Rejected, TurnRemoval, load_events, map_events, parse_events

__all__ = ["FORMATS", "Mapped", "Rejected", "TurnRemoval", "load_events", "map_events", "parse_events"]
