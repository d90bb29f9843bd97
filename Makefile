# The two set-up commands of the README.
.PHONY: demo test install check

demo:  ## stream a conversation through Kafka into memory, then ask it questions
	bash scripts/demo.sh

test:  ## every test, against a real Kafka broker, LLM server, embedder and Qdrant
	bash scripts/test.sh

install:
	bash scripts/install.sh

check:  ## lint, format, types and the unit tests (no services): under a minute
	bash scripts/check.sh
