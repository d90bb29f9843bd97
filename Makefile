# The two set-up commands of the README.
.PHONY: demo test test-cluster install check

demo:  ## stream a conversation through Kafka into memory, then ask it questions
	bash scripts/demo.sh

test:  ## every test, against a real Kafka broker, LLM server, embedder and Qdrant
	bash scripts/test.sh

test-cluster:  ## the cluster tests (-m cluster): memstream on a 3-broker Kafka cluster, started by their fixtures
	bash scripts/test_cluster.sh

install:
	bash scripts/install.sh

check:  ## lint, format, types and the unit tests (no services): under a minute
	bash scripts/check.sh
