"""The gateway: a stateless bridge from HTTP (JSON API, chat-platform webhooks) and MCP to memstream's
topics, for callers that do not speak Kafka. Run several behind a load balancer; they share nothing."""
