"""Kafka plumbing: the faust app, topics, agents and tables, clients, and the CLI."""
