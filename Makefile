# The two set-up commands of the README.
.PHONY: demo test install

demo:  ## stream a conversation through Kafka into memory, then ask it questions
	bash scripts/demo.sh

test:  ## every test, against a real Kafka broker, LLM server, embedder and Qdrant
	bash scripts/test.sh

install:
	bash scripts/install.sh
