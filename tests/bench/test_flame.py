"""Folding a py-spy raw profile into the parts a turn pays for (pure)."""

from memstream.bench.flame import OTHER, fold, per_turn_ms

BENCH = 'process 1:"python memstream bench ingest"'
WORKER = 'process 3:"python -m memstream.streams.cli worker --no-supervise"'
SEGMENT = "handler (streams/stages/segment.py:80);Segmenter._evaluate (processors/write/segment.py:230)"
ENCODE = "OnnxEncoder.encode (memstream/adapters/onnx_encoder.py:150)"
LINES = [
    f"{BENCH};main (bench/cli.py:1);OnnxEncoder.encode (memstream/adapters/onnx_encoder.py:150) 40",  # not the worker
    f"{BENCH};{WORKER};{SEGMENT};EncoderAttention.cohesion (memstream/adapters/encoder_attention.py:70) 30",
    f"{BENCH};{WORKER};{SEGMENT};OnnxEncoder.encode (memstream/adapters/onnx_encoder.py:150) 20",
    f"{BENCH};{WORKER};index (streams/stages/index.py:27);{ENCODE} 25",
    f"{BENCH};{WORKER};Sender._send_produce_req (aiokafka/producer/sender.py:300) 15",
    f"{BENCH};{WORKER};<module> (streams/cli.py:1);_find_and_load (<frozen importlib._bootstrap>:1) 5",
    f"{BENCH};{WORKER};BaseEventLoop._run_once (asyncio/base_events.py:1) 5",
    "garbage line",
]


def test_worker_samples_fold_into_parts_by_the_first_matching_marker():
    folded = fold(LINES, rate_hz=10)
    parts = {name: row["samples"] for name, row in folded["parts"].items()}
    assert folded["samples"] == 100  # the bench process's own 40 samples are not the worker's
    assert parts == {
        "segment: attention pass": 30,
        "index: embedding (ONNX Runtime)": 25,
        "segment: embedding (ONNX Runtime)": 20,  # the same encoder call, under the segment stage
        "Kafka client (aiokafka, faust)": 15,
        "start-up (imports, model loading)": 5,
        OTHER: 5,
    }
    assert folded["parts"]["segment: attention pass"] == {"samples": 30, "cpu_s": 3.0, "share": 0.3}
    per_turn = per_turn_ms(folded, turns=10)
    assert per_turn["index: embedding (ONNX Runtime)"] == 250.0
    assert "start-up (imports, model loading)" not in per_turn
