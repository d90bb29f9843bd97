"""The algorithms of every stage: plain, typed, Kafka-free."""
