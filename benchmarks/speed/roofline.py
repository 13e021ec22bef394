"""What limits the int8 graph: a profile per op type against what this CPU reaches on big matmuls.

    python -m benchmarks.speed.roofline                  # about 4-5 minutes on 2 cores
    python -m benchmarks.speed.roofline --rounds 5 --no-options

1. **Profile** (ONNX Runtime's profiler) of the default int8 graph (``Embedder(variant="int8")``) on 32
   doc chunks (~110 tokens, in the calls ``embed`` makes) and a one-sentence query, 2 and 1 threads:
   per op type the share of kernel time; for matmuls and attention the operations (``2*M*K*N`` from
   the recorded shapes; attention ``4*B*S*S*H``) and GOPS. Each node counts with its best pass.
2. **Ceiling**: big matmuls of the same kinds in one-node graphs (u8 x s8 ``MatMulInteger`` /
   ``MatMulIntegerToFloat``, fp32 / fp16 ``MatMul``, 4096x384x1536 and 4096x1536x384, an
   attention-shaped fp32 batch), numpy fp32, and the graph's int8 shapes alone; ``x ceiling`` =
   achieved / the best big matmul of that kind. A numpy copy gives the bandwidth each matmul's
   arithmetic intensity is held against.
3. **Options** on the int8 graph, each timed in pairs with the default (alternating order; one-thread
   rows in CPU time): optimisation levels, the installed ORT's session config keys that touch this
   graph, spinning, ORT's transformer optimizer, graph prototypes built here (the package's graph is
   unchanged); each checked against the golden sentence-transformers vectors (min cos >= 0.99, mean
   >= 0.998), batched as ``embed`` batches and one text per call.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import functools
import io
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks import workloads
from benchmarks.common import cpu_line
from contextsieve.models.embedder import CALL_COST_TOKENS
from contextsieve.models.runtime import onnxruntime
from contextsieve.models.variants import MEAN_COSINE, MIN_COSINE, golden_set

ort = onnxruntime()  # telemetry off, as contextsieve imports it

MS = "com.microsoft"
MATMULS = ("MatMulIntegerToFloat", "MatMulInteger", "MatMul")
Feed = dict[str, np.ndarray]
#: The graph's int8 layers (K x N): qkv, attention output, FFN in, FFN out.
LAYERS = ((384, 1152), (384, 384), (384, 1536), (1536, 384))
LEVELS = ("ORT_ENABLE_ALL", "ORT_ENABLE_LAYOUT", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_BASIC", "ORT_DISABLE_ALL")
BIG = ((4096, 384, 1536), (4096, 1536, 384))
ATTN = (32 * 12, 128, 32)  # QK^T-shaped batched fp32 matmul: 32 rows x 12 heads, 128 tokens, head size 32


def session(
    model: str | bytes,
    threads: int,
    level: str = "ORT_ENABLE_ALL",
    config: dict[str, str] | None = None,
    profile: str | None = None,
) -> ort.InferenceSession:
    """A CPU session as ``contextsieve.models.embedder._new_session`` makes it (threads spin within a call,
    never after it), ``config`` entries on top (an empty value drops a default entry)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    spin = {"session.intra_op.allow_spinning": "1", "session.force_spinning_stop": "1"}
    for k, v in {**(spin if threads > 1 else {"session.intra_op.allow_spinning": "0"}), **(config or {})}.items():
        if v:
            so.add_session_config_entry(k, v)
    if profile:
        so.enable_profiling, so.profile_file_prefix = True, profile
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def feeds(emb: Any, texts: Sequence[str]) -> list[tuple[np.ndarray, Feed]]:
    """The calls ``emb.embed(texts)`` makes: (row indices, inputs) per call."""
    return [
        (np.asarray(b.index), {"input_ids": b.input_ids, "attention_mask": b.attention_mask})
        for b in emb.tokenizer.batches(list(texts), emb.batch_size, emb.batch_tokens, CALL_COST_TOKENS)
    ]


# -- 1. the profile ---------------------------------------------------------------------------------


@dataclass
class Profile:
    """One pass over a workload: kernel microseconds and operations per op type."""

    us: dict[str, float]
    ops: dict[str, float]
    wall_us: float  # best unprofiled pass (without the profiler's cost per node; CPU time at 1 thread)
    node_us: dict[str, list[float]]  # "MatMulIntegerToFloat KxN" / op type -> each node's time, best pass

    @property
    def total(self) -> float:
        return sum(self.us.values())


def _shapes(args: dict[str, Any], key: str) -> list[list[int]]:
    return [next(iter(d.values())) for d in args.get(key, [])]


def profile(model: str, threads: int, calls: Sequence[Feed], runs: int, tmp: str) -> Profile:
    """Profile ``runs`` passes over ``calls`` after a warm one; each node counts with its best pass."""
    s = session(model, threads, profile=f"{tmp}/p{threads}")
    for _ in range(runs + 1):
        for f in calls:
            s.run(None, f)
    events = json.loads(Path(s.end_profiling()).read_text())
    starts = sorted(e["ts"] for e in events if e.get("name") == "model_run")
    n, best, info = len(calls), dict[tuple[int, str], float](), dict[tuple[int, str], tuple[str, float, str]]()
    for e in events:
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or i < n:  # i < n: the warm pass
            continue
        key = (i % n, e["name"])
        best[key] = min(best.get(key, float("inf")), float(e["dur"]))
        if key not in info:
            a, op = e["args"], e["args"]["op_name"]
            ins, outs = _shapes(a, "input_type_shape"), _shapes(a, "output_type_shape")
            ops, kind = 0.0, op
            if op in MATMULS:
                ops, kind = 2.0 * float(np.prod(outs[0])) * ins[0][-1], f"{op} {ins[0][-1]}x{outs[0][-1]}"
            elif op == "MultiHeadAttention":
                ops = 4.0 * ins[0][0] * ins[0][1] ** 2 * ins[0][2]
            info[key] = (op, ops, kind)
    us: dict[str, float] = collections.defaultdict(float)
    ops_: dict[str, float] = collections.defaultdict(float)
    node_us: dict[str, list[float]] = collections.defaultdict(list)
    for key, dur in best.items():
        op, o, kind = info[key]
        us[op], ops_[op] = us[op] + dur, ops_[op] + o
        node_us[kind].append(dur)
    plain = session(model, threads)
    wall = min(_pass_time(plain, calls, _clock(threads)) for _ in range(runs + 1))
    return Profile(dict(us), dict(ops_), wall * 1e6, dict(node_us))


def _clock(threads: int) -> Callable[[], float]:
    """Wall time for a thread pool; for one thread the calling thread's CPU time (ORT runs a one-thread
    session on the caller), which the other processes' turns on the core do not inflate."""
    return time.thread_time if threads == 1 else time.perf_counter


def _pass_time(s: ort.InferenceSession, calls: Sequence[Feed], clock: Callable[[], float]) -> float:
    t = clock()
    for f in calls:
        s.run(None, f)
    return clock() - t


# -- 2. the ceiling ---------------------------------------------------------------------------------


def one_node(kind: str, k: int, n: int, batch: int = 0) -> bytes:
    """A one-node graph ``a [M, k] @ w [k, n]``: ``int`` MatMulInteger u8 x s8, ``i2f`` MatMulIntegerToFloat
    with a per-row scale (as the graph runs it), ``f32`` / ``f16`` / ``bf16`` MatMul; ``batch`` > 0: fp32
    ``[batch, M, k] @ [batch, k, n]``, both sides inputs."""
    rng, vi = np.random.default_rng(0), helper.make_tensor_value_info
    if batch:
        ins = [vi("a", TensorProto.FLOAT, [batch, "M", k]), vi("b", TensorProto.FLOAT, [batch, k, n])]
        node, inits = helper.make_node("MatMul", ["a", "b"], ["y"]), []
        out = vi("y", TensorProto.FLOAT, [batch, "M", n])
    elif kind in ("int", "i2f"):
        inits = [
            numpy_helper.from_array(rng.integers(-127, 128, (k, n)).astype(np.int8), "w"),
            numpy_helper.from_array(np.array(128, np.uint8), "za"),
            numpy_helper.from_array(np.zeros(n, np.int8), "zw"),
            numpy_helper.from_array(np.full(n, 0.01, np.float32), "sw"),
        ]
        ins = [vi("a", TensorProto.UINT8, ["M", k])]
        if kind == "int":
            node = helper.make_node("MatMulInteger", ["a", "w", "za", "zw"], ["y"])
            out = vi("y", TensorProto.INT32, ["M", n])
        else:
            ins.append(vi("sa", TensorProto.FLOAT, ["M", 1]))
            node = helper.make_node("MatMulIntegerToFloat", ["a", "w", "sa", "sw", "za", "zw"], ["y"], domain=MS)
            out = vi("y", TensorProto.FLOAT, ["M", n])
    else:
        dt = {"f32": TensorProto.FLOAT, "f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16}[kind]
        w = rng.standard_normal((k, n)).astype(np.float32)
        bf16 = (w.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16
        raw = w if kind == "f32" else w.astype(np.float16) if kind == "f16" else bf16
        inits = [helper.make_tensor("w", dt, [k, n], raw.tobytes(), raw=True)]
        ins, out = [vi("a", dt, ["M", k])], vi("y", dt, ["M", n])
        node = helper.make_node("MatMul", ["a", "w"], ["y"])
    m = helper.make_model(
        helper.make_graph([node], "g", ins, [out], initializer=inits),
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
    )
    m.ir_version = 10
    return m.SerializeToString()


def matmul_feed(kind: str, m: int, k: int, n: int, batch: int = 0) -> Feed:
    rng = np.random.default_rng(1)
    if batch:
        return {
            "a": rng.standard_normal((batch, m, k)).astype(np.float32),
            "b": rng.standard_normal((batch, k, n)).astype(np.float32),
        }
    if kind in ("int", "i2f"):
        f = {"a": rng.integers(0, 256, (m, k)).astype(np.uint8)}
        return {**f, "sa": np.full((m, 1), 0.01, np.float32)} if kind == "i2f" else f
    return {"a": rng.standard_normal((m, k)).astype(np.float32 if kind == "f32" else np.float16)}


def best_gops(fn: Callable[[], object], ops: float, seconds: float = 0.4) -> float:
    """GOPS of ``fn``'s best call over about ``seconds`` (after a warm call): what the CPU can do."""
    fn()
    best, end = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < end or best == float("inf"):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return ops / best / 1e9


def ceilings(threads: Sequence[int], chunk_rows: int, query_rows: int) -> dict[tuple[str, int], float]:
    """GOPS per (row label, threads); prints the table."""
    rows: list[tuple[str, Callable[[int], float]]] = []
    for kind, label in (
        ("int", "MatMulInteger u8 x s8"),
        ("i2f", "MatMulIntegerToFloat u8 x s8"),
        ("f32", "MatMul fp32"),
        ("f16", "MatMul fp16"),
    ):
        for m, k, n in BIG:

            def big(th: int, kind: str = kind, m: int = m, k: int = k, n: int = n) -> float:
                s, f = session(one_node(kind, k, n), th), matmul_feed(kind, m, k, n)
                return best_gops(lambda: s.run(None, f), 2.0 * m * k * n)

            rows.append((f"{label}, {m}x{k}x{n}", big))
    b, t_, d = ATTN

    def attn(th: int) -> float:
        s, f = session(one_node("f32", d, t_, batch=b), th), matmul_feed("f32", t_, d, t_, batch=b)
        return best_gops(lambda: s.run(None, f), 2.0 * b * t_ * d * t_)

    rows.append((f"MatMul fp32 attention-shaped, {b}x[{t_}x{d}x{t_}]", attn))
    for m, k, n in BIG:

        def npy(th: int, m: int = m, k: int = k, n: int = n) -> float:
            a, w = (np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in ((m, k), (k, n)))
            with _blas_threads(th):
                return best_gops(lambda: a @ w, 2.0 * m * k * n)

        rows.append(
            (f"numpy fp32, {m}x{k}x{n}" + (" (numpy's threads)" if find_spec("threadpoolctl") is None else ""), npy)
        )
    for m, what in ((chunk_rows, "chunk call"), (query_rows, "query")):

        def layer(th: int, m: int = m) -> float:
            ss = [(session(one_node("i2f", k, n), th), matmul_feed("i2f", m, k, n)) for k, n in LAYERS]
            return best_gops(lambda: [s.run(None, f) for s, f in ss], sum(2.0 * m * k * n for k, n in LAYERS))

        rows.append((f"MatMulIntegerToFloat, one layer's 4 shapes alone, M={m} ({what})", layer))
    out: dict[tuple[str, int], float] = collections.defaultdict(float)
    for _ in range(2):  # two sweeps, tens of seconds apart: a busy spell of the machine spoils one at most
        for (label, fn), t in itertools.product(rows, threads):
            out[label, t] = max(out[label, t], fn(t))
    print("\n## Ceiling: what this CPU reaches (GOPS, best call of two sweeps)\n")
    print("| matmul | " + " | ".join(f"{t} thr" for t in threads) + " |\n| --- |" + " --- |" * len(threads))
    for label, _ in rows:
        print(f"| {label} | " + " | ".join(f"{out[label, t]:.0f}" for t in threads) + " |")
    try:
        session(one_node("bf16", 64, 64), 1)
        print("\nbf16 MatMul: the CPU provider has a kernel")
    except Exception as e:  # ORT raises its own NotImplemented type
        print(f"\nbf16 MatMul on the CPU provider: {str(e).split(':', 2)[-1].strip()[:90]}")
    return out


def _blas_threads(n: int) -> Any:
    """numpy's BLAS on ``n`` threads (threadpoolctl; without it numpy's own count, which the label says)."""
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(n)


def bandwidth() -> tuple[float, float]:
    """numpy copy GB/s (bytes read + written, best call, one thread): 8 MB and 256 MB arrays."""
    out = []
    for mb in (8, 256):
        a = np.ones(mb * 2**18, np.float32)
        b = np.empty_like(a)
        out.append(best_gops(functools.partial(np.copyto, b, a), 2.0 * a.nbytes, seconds=0.3))
    return out[0], out[1]


# -- 3. graph prototypes, built here from the cached int8 graph --------------------------------------


def _rebuild(m: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> bytes:
    """``m`` with ``nodes``, less the nodes and initializers no output needs."""
    need, keep = {o.name for o in m.graph.output}, []
    for n in reversed(nodes):
        if any(o in need for o in n.output):
            keep.append(n)
            need.update(i for i in n.input if i)
    c = onnx.ModelProto()
    c.CopyFrom(m)
    del c.graph.node[:], c.graph.initializer[:]
    c.graph.node.extend(reversed(keep))
    c.graph.initializer.extend(t for t in m.graph.initializer if t.name in need)
    return c.SerializeToString()


def proto_no_mask(m: onnx.ModelProto) -> bytes:
    """``MultiHeadAttention`` without its key padding mask, so ORT runs its MLAS flash attention. Right
    only for calls without padding (one text, or rows of one length): the candidate routes only those."""
    m = onnx.load_from_string(m.SerializeToString())
    for n in m.graph.node:
        if n.op_type == "MultiHeadAttention":
            del n.input[4:]
    return m.SerializeToString()


def proto_fast_gelu(m: onnx.ModelProto) -> bytes:
    """``FastGelu`` (tanh approximation, same bias input) instead of ``BiasGelu`` (erf)."""
    m = onnx.load_from_string(m.SerializeToString())
    for n in m.graph.node:
        n.op_type = "FastGelu" if n.op_type == "BiasGelu" else n.op_type
    return m.SerializeToString()


def proto_qattention(m: onnx.ModelProto, hidden: int = 384, heads: int = 12) -> bytes:
    """ORT's fused int8 attention: each layer's per-row quantisation, qkv ``MatMulIntegerToFloat``,
    ``Split`` and ``MultiHeadAttention`` become ``DynamicQuantizeLinear`` (one u8 scale per tensor: the op
    takes no per-row scale) and ``QAttention`` on the same int8 weights and per-column scales."""
    prod = {o: n for n in m.graph.node for o in n.output}
    nodes = [
        helper.make_node("Shape", ["input_ids"], ["qa.bs"]),
        helper.make_node("Concat", ["qa.bs", "qa.h"], ["qa.shape"], axis=0),
    ]
    m = onnx.load_from_string(m.SerializeToString())
    m.graph.initializer.append(numpy_helper.from_array(np.array([hidden], np.int64), "qa.h"))
    for n in m.graph.node:
        if n.op_type != "MultiHeadAttention":
            nodes.append(n)
            continue
        mmi = prod[prod[prod[n.input[0]].input[0]].input[0]]  # Split <- Reshape <- MatMulIntegerToFloat
        if mmi.op_type != "MatMulIntegerToFloat":
            raise ValueError(f"unexpected qkv producer {mmi.op_type}")
        xs, p = prod[mmi.input[0]].input[0], n.name  # the smoothed [T, hidden] input of its QuantizeLinear
        nodes += [
            helper.make_node("Reshape", [xs, "qa.shape"], [p + ".x3"]),
            helper.make_node("DynamicQuantizeLinear", [p + ".x3"], [p + ".q", p + ".s", p + ".z"]),
            helper.make_node(
                "QAttention",
                [p + ".q", mmi.input[1], n.input[3], p + ".s", mmi.input[3], n.input[4], p + ".z"],
                [n.output[0]],
                domain=MS,
                num_heads=heads,
            ),
        ]
    return _rebuild(m, nodes)


# -- 3. options, timed side by side ------------------------------------------------------------------


@dataclass
class Candidate:
    label: str
    model: str | bytes
    threads: int = 2
    level: str = "ORT_ENABLE_ALL"
    config: dict[str, str] = field(default_factory=dict)
    no_mask: bytes | None = None  # a graph for the calls without padding (proto_no_mask)
    sessions: list[Any] = field(default_factory=list)
    chunk: list[float] = field(default_factory=list)  # seconds per chunk, per pass
    query: list[float] = field(default_factory=list)
    ratio: list[tuple[float, float]] = field(default_factory=list)  # default / this, chunk and query, per pair
    cos: tuple[float, float] = (1.0, 1.0)

    def run(self, f: Feed) -> np.ndarray:
        if not self.sessions:
            self.sessions = [session(g, self.threads, self.level, self.config) for g in (self.model, self.no_mask) if g]
        s = self.sessions[-1] if bool(f["attention_mask"].all()) else self.sessions[0]
        return np.asarray(s.run(["sentence_embedding"], f)[0])


def candidates(int8: str, fp32: str) -> list[Candidate]:
    """Thread-pool options and the main graph changes at 2 threads; the rest at 1 thread, which a process
    on the other core disturbs less. (ORT's default spinning, kept after a call, is left out: its threads
    would spin on into the rows timed after it, and an idle embedder must not hold a core.)"""
    m8 = onnx.load(int8)
    qa = proto_qattention(m8)
    qa_fg = ("graph: QAttention + FastGelu", dict(model=proto_fast_gelu(onnx.load_from_string(qa))))
    qa_row = ("graph: QAttention (fused int8 attention, per-tensor scale)", dict(model=qa))
    spin = {"session.intra_op.allow_spinning": "0", "session.force_spinning_stop": ""}
    again: tuple[str, dict[str, Any]] = ("default again, its own session (the noise floor)", {})
    two: list[tuple[str, dict[str, Any]]] = [again, ("no spinning", dict(config=spin)), qa_row, qa_fg]
    two.insert(2, ("session.dynamic_block_base=4", dict(config={"session.dynamic_block_base": "4"})))
    one: list[tuple[str, dict[str, Any]]] = [again] + [(lv, dict(level=lv)) for lv in LEVELS[1:]]
    for k in ("set_denormal_as_zero=1", "x64quantprecision=1", "disable_prepacking=1"):
        one.append((f"session.{k}", dict(config={f"session.{k.split('=')[0]}": k.split("=")[1]})))
    one += [
        ("graph: no padding mask in calls without padding (flash attention)", dict(no_mask=proto_no_mask(m8))),
        qa_row,
        ("graph: FastGelu for BiasGelu", dict(model=proto_fast_gelu(m8))),
        qa_fg,
        ("fp32 graph", dict(model=fp32)),
    ]
    out = []
    for th, rows in ((2, two), (1, one)):
        out.append(Candidate(f"default (as Embedder), {th} thr", int8, th))
        out += [Candidate(f"{label}, {th} thr", **{"model": int8, **kw}, threads=th) for label, kw in rows]
    return out


def level_nodes(model: str, tmp: str) -> str:
    """Nodes of the graph ORT runs after each optimisation level (its optimised graph, saved)."""
    out = []
    for lv in LEVELS:
        so = ort.SessionOptions()
        so.log_severity_level = 3  # not its note that a saved ALL-level graph is for this CPU only
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, lv)
        so.optimized_model_filepath = f"{tmp}/{lv}"
        ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        out.append(f"{lv} {len(onnx.load(so.optimized_model_filepath).graph.node)}")
    return ", ".join(out)


def fp32_optimizer(fp32: str) -> tuple[str, bytes | None]:
    """ORT's transformer optimizer (bert) on the fp32 graph: what it fused, and its graph if it differs."""
    from onnxruntime.transformers import optimizer

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its notes
        opt = optimizer.optimize_model(
            fp32, model_type="bert", num_heads=12, hidden_size=384, opt_level=0, use_gpu=False
        )
    stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
    same = sorted(n.op_type for n in onnx.load(fp32).graph.node) == sorted(n.op_type for n in opt.model.graph.node)
    note = f"fused ops {stats}; {'op-for-op our graph' if same else 'a different graph'}"
    return note, None if same else opt.model.SerializeToString()


def run_options(
    cands: list[Candidate], chunk_calls: list[tuple[np.ndarray, Feed]], query: Feed, rounds: int, emb: Any
) -> None:
    texts, ref = golden_set("all-MiniLM-L6-v2")
    assert ref is not None
    single = [(np.array([i]), feeds(emb, [t])[0][1]) for i, t in enumerate(texts)]
    n_chunks = sum(len(i) for i, _ in chunk_calls)
    for c in cands:
        for calls in (feeds(emb, texts), single):
            got = np.empty_like(ref)
            for idx, f in calls:
                got[idx] = c.run(f)
            cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
            c.cos = (min(c.cos[0], float(cos.min())), min(c.cos[1], float(cos.mean())))
        for _, f in chunk_calls:  # warm
            c.run(f)
    base = {c.threads: c for c in reversed(cands) if c.label.startswith("default (as")}
    for r in range(rounds):  # each row paired with its default, timed right after or before it
        for i, c in enumerate([c for c in cands if c is not base[c.threads]][:: 1 if r % 2 == 0 else -1]):
            got = {}
            for x in (base[c.threads], c) if (r + i) % 2 == 0 else (c, base[c.threads]):
                clock = _clock(x.threads)
                t = clock()
                for _, f in chunk_calls:
                    x.run(f)
                x.chunk.append((clock() - t) / n_chunks)
                for _ in range(10):
                    t = clock()
                    x.run(query)
                    x.query.append(clock() - t)
                got[x.label] = (x.chunk[-1], statistics.median(x.query[-10:]))
            d = got[base[c.threads].label]
            c.ratio.append((d[0] / got[c.label][0], d[1] / got[c.label][1]))
    print(f"\n## Options ({rounds} rounds; x default: median of the ratios to the paired default; 1 thr: CPU time)\n")
    print("| option | ms / chunk | x default | query p50 ms | x default | min / mean cos | passes |")
    print("| --- " * 7 + "|")
    for c in cands:
        rc, rq = (statistics.median(x) for x in zip(*c.ratio)) if c.ratio else (1.0, 1.0)
        ok = "yes" if c.cos[0] >= MIN_COSINE and c.cos[1] >= MEAN_COSINE else "no"
        print(
            f"| {c.label} | {statistics.median(c.chunk) * 1e3:.2f} | {rc:.2f} | {statistics.median(c.query) * 1e3:.3f}"
            f" | {rq:.2f} | {c.cos[0]:.5f} / {c.cos[1]:.5f} | {ok} |"
        )


# -- printing --------------------------------------------------------------------------------------


def _ceil(op: str) -> str:  # the ceiling rows of an op type (fp32 matmuls for attention)
    return "MatMul fp32," if op in ("MatMul", "MultiHeadAttention") else f"{op} u8 x s8,"


def print_profile(name: str, per: int, profs: dict[int, Profile], ceil: dict[tuple[str, int], float]) -> None:
    ths, p2 = list(profs), profs[2]
    shown = [o for o in sorted(p2.us, key=lambda o: -p2.us[o]) if p2.us[o] >= 0.01 * p2.total]
    print(f"\n## Profile: {name}\n")
    head = [f"share {t} thr" for t in ths] + ["GOP"] + [f"{w} {t} thr" for w in ("GOPS", "x ceiling") for t in ths]
    print("| op type | " + " | ".join(head) + " |\n| --- |" + " --- |" * len(head))
    for op in [*shown, "other"]:
        us = {
            t: profs[t].us.get(op, 0.0) if op != "other" else sum(v for o, v in profs[t].us.items() if o not in shown)
            for t in ths
        }
        ops = p2.ops.get(op, 0.0)
        gops = {t: ops / (us[t] * 1e3) if ops else 0.0 for t in ths}
        top = {t: max([v for (k, th), v in ceil.items() if th == t and k.startswith(_ceil(op))] or [0.0]) for t in ths}
        row = [f"{100 * us[t] / profs[t].total:.1f}%" for t in ths] + [f"{ops / per / 1e9:.3f}" if ops else "-"]
        row += [f"{gops[t]:.0f}" if ops else "-" for t in ths]
        row += [f"{gops[t] / top[t]:.2f}" if ops and top[t] else "-" for t in ths]
        print(f"| {op} | " + " | ".join(row) + " |")
    for t in ths:
        p, o, cpu = profs[t], sum(profs[t].ops.values()), " (CPU time)" if t == 1 else ""
        print(
            f"\n{t} thr: kernels {p.total / 1e3 / per:.3f} ms, an unprofiled pass {p.wall_us / 1e3 / per:.3f} ms{cpu} "
            f"({o / per / 1e9:.2f} GOP: {o / p.wall_us / 1e3:.0f} GOPS overall)",
            end="",
        )
    print(f"\n(GOP and ms per {'chunk' if per > 1 else 'call'})")


def print_intensity(
    calls: dict[str, list[Feed]], profs: dict[str, Profile], ceil: dict[tuple[str, int], float], bw: tuple[float, float]
) -> None:
    """Per matmul kind and workload: ops per byte, the times compute and bandwidth allow, the measured time."""
    i8 = max(v for (k, t), v in ceil.items() if t == 1 and k.startswith(_ceil("MatMulIntegerToFloat")))
    f32 = max(v for (k, t), v in ceil.items() if t == 1 and k.startswith(_ceil("MatMul")))
    print(
        f"\n## Roofline, 1 thread, one layer per pass (ceilings {i8:.0f} int8 / {f32:.0f} fp32 GOPS; "
        f"copy {bw[0]:.1f} GB/s at 8 MB, {bw[1]:.1f} GB/s at 256 MB)\n"
    )
    print("| workload | matmul | ops / byte | compute-bound us | 8 MB-bw us | 256 MB-bw us | measured us | x bound |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for wl, cs in calls.items():
        tok, sq = [f["input_ids"].size for f in cs], [f["input_ids"].size * f["input_ids"].shape[1] for f in cs]
        kinds = []
        for k, n in LAYERS:  # weights once per call; u8 rows in, fp32 rows and their scales out
            byts = k * n * len(tok) + (k + 4 * n + 4) * sum(tok)
            kinds.append((f"int8 {k}x{n}", f"MatMulIntegerToFloat {k}x{n}", 2.0 * k * n * sum(tok), byts, i8))
        byts = 16.0 * 384 * sum(tok) + 8.0 * 12 * sum(sq)  # q, k, v read, output written; scores written and read
        kinds.append(("attention fp32", "MultiHeadAttention", 4.0 * 384 * sum(sq), byts, f32))
        for label, key, ops, byts, peak in kinds:
            got = sum(profs[wl].node_us.get(key, [])) / 6  # six layers
            bound = max(ops / peak / 1e3, byts / bw[0] / 1e3)
            print(
                f"| {wl} | {label} | {ops / byts:.0f} | {ops / peak / 1e3:.1f} | {byts / bw[0] / 1e3:.1f} | "
                f"{byts / bw[1] / 1e3:.1f} | {got:.1f} | {got / bound:.1f} |"
            )
    print("\n(x bound: measured / the larger of the compute and 8 MB-bandwidth times; near 1 a kernel sits on its")
    print(" roofline, far above it fixed costs per node dominate)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12, help="rounds of the options table (default 12)")
    ap.add_argument("--profile-runs", type=int, default=5, help="profiled passes per workload (default 5)")
    ap.add_argument("--no-options", action="store_true", help="profile and ceiling only")
    args = ap.parse_args()
    from contextsieve import Embedder

    emb = Embedder(variant="int8", adapt_threads=False)
    int8, fp32 = str(emb.info.onnx_path), str(Embedder(variant="fp32", adapt_threads=False).info.onnx_path)
    print(f"{cpu_line()}; onnxruntime {ort.__version__}")
    chunk_calls, query = feeds(emb, workloads.doc_chunks(32)), feeds(emb, [workloads.QUERY])[0][1]
    rows = [f["input_ids"].size for _, f in chunk_calls]
    print(f"workloads: 32 chunks, {len(rows)} calls, {sum(rows)} padded tokens; query {query['input_ids'].size} tokens")
    with tempfile.TemporaryDirectory() as tmp:
        pc = {t: profile(int8, t, [f for _, f in chunk_calls], args.profile_runs, tmp) for t in (2, 1)}
        pq = {t: profile(int8, t, [query], args.profile_runs * 20, tmp) for t in (2, 1)}
    ceil = ceilings((2, 1), sum(rows) // len(rows), query["input_ids"].size)
    print_profile("32 chunks", 32, pc, ceil)
    print_profile("one-sentence query", 1, pq, ceil)
    print_intensity(
        {"chunks": [f for _, f in chunk_calls], "query": [query]}, {"chunks": pc[1], "query": pq[1]}, ceil, bandwidth()
    )
    if not args.no_options:
        note, opt_graph = fp32_optimizer(fp32)
        print(f"\nonnxruntime.transformers.optimizer (bert) on the fp32 graph: {note}")
        with tempfile.TemporaryDirectory() as tmp:
            print(f"int8 graph nodes after each optimisation level: {level_nodes(int8, tmp)}")
        cands = candidates(int8, fp32)
        cands += [Candidate("fp32 graph through the transformer optimizer, 2 thr", opt_graph)] if opt_graph else []
        run_options(cands, chunk_calls, query, args.rounds, emb)


if __name__ == "__main__":
    main()
