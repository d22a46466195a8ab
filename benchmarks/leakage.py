"""Leakage-feature benchmark: a QQP-sized graph (400k pairs, ~540k sentences, planted degree leakage).

All twelve features in DuckDB SQL against a networkx reference in the same run (goal ≤ 10 s here).

    .venv/bin/python benchmarks/leakage.py [--rows 400000] [--pool 200000]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from collections import Counter

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from refinery.io import synth
from refinery.models.leakage_settings import ADVANCED_FEATURES  # noqa: E402
from refinery.models.sentence_graph import corpus_features  # noqa: E402
from machine import machine_line  # noqa: E402  (benchmarks/machine.py)


def reference_features(u, v, multigraph: bool = True) -> dict[str, np.ndarray]:
    """The leakage features of METHODS §4 on a networkx (Multi)Graph, pair by pair in Python.

    A[u,w] counts the edges joining u and w (a self-loop counts twice, so deg = Σ_w A[u,w]);
    (A²)[u,v] and (A³)[u,v] are summed from the lower-degree end, with (A²) memoized.
    """
    import networkx as nx

    G = nx.MultiGraph() if multigraph else nx.Graph()
    G.add_edges_from(zip(u.tolist(), v.tolist()))

    def A(a, b):
        n = G.number_of_edges(a, b)
        return 2 * n if a == b and n else n

    nbrs = {n: set(G.adj[n]) for n in G.nodes}
    deg = {n: sum(A(n, w) for w in nbrs[n]) for n in G.nodes}
    hop2 = {n: sum(A(n, x) * (deg[x] - A(x, n)) for x in nbrs[n]) for n in G.nodes}
    hop3 = {n: sum(A(n, x) * (hop2[x] - A(x, n) * (deg[n] - A(n, x))) for x in nbrs[n]) for n in G.nodes}
    a2_cache: dict = {}

    def a2(a, b):
        key = (min(a, b), max(a, b))
        if key not in a2_cache:
            s, t = (a, b) if deg[a] <= deg[b] else (b, a)
            a2_cache[key] = sum(A(s, w) * A(w, t) for w in nbrs[s] if t in nbrs[w])
        return a2_cache[key]

    out = {k: [] for k in ADVANCED_FEATURES}
    for a, b in zip(u.tolist(), v.tolist()):
        s, t = (a, b) if deg[a] <= deg[b] else (b, a)
        common = nbrs[a] & nbrs[b]
        out["s1_freq"].append(deg[a])
        out["s2_freq"].append(deg[b])
        out["s1s2_inter"].append(a2(a, b))
        out["s1s2_paths3"].append(sum(A(s, x) * a2(x, t) for x in nbrs[s]))
        out["s1_hop2"].append(hop2[a])
        out["s2_hop2"].append(hop2[b])
        out["s1_hop3"].append(hop3[a])
        out["s2_hop3"].append(hop3[b])
        out["resource_allocation"].append(sum(1 / deg[w] for w in common))
        out["jaccard"].append(len(common) / len(nbrs[a] | nbrs[b]))
        out["preferential_attachment"].append(deg[a] * deg[b])
        out["adamic_adar"].append(sum(1 / math.log(deg[w]) for w in common if deg[w] > 1))
    return {k: np.array(x, dtype=float) for k, x in out.items()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--pool", type=int, default=200_000, help="Premise pool (label-dependent popularity).")
    p.add_argument("--skip-reference", action="store_true")
    args = p.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="refinery-bench-") as work:
        src = os.path.join(work, "synth")
        synth.write(synth.SynthSpec(rows=args.rows, seed=11, premise_pool=args.pool), src)
        t = time.perf_counter()
        features = corpus_features({"train": src}).features()
        wall = time.perf_counter() - t
    u, v = features["u"].to_numpy(), features["v"].to_numpy()
    nodes = np.unique(np.concatenate([u, v])).size
    top = Counter(u.tolist()).most_common(1)[0][1]
    print(f"leakage features, {features.num_rows:,} pairs, {nodes:,} sentences (max degree {top:,}): "
          f"DuckDB {wall:.2f}s (read + graph + 12 features)")
    if args.skip_reference:
        return
    t = time.perf_counter()
    ref = reference_features(u, v)
    ref_wall = time.perf_counter() - t
    worst = max(float(np.max(np.abs(ref[k] - features[k].to_numpy().astype(float)))) for k in ref)
    print(f"networkx reference (graph ids given, no reading): {ref_wall:.2f}s; "
          f"speed-up {ref_wall / wall:.1f}x; max |difference| over all features {worst:.2e}")


if __name__ == "__main__":
    main()
