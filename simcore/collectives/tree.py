"""Double binary tree all-reduce (Sanders, Speck & Traeff 2009; NCCL >= 2.4).

Two binary trees over the group, each reducing half the buffer up to its root and broadcasting
it back down, pipelined: every tree edge carries S/2 up and S/2 down. As in NCCL, the trees span
*nodes*: inside a node the ranks form a chain, and the chains' ends are the tree vertices (tree 1
enters each node at the chain's first rank, tree 2 at its last, so the two trees use different
GPUs), and a tree edge between nodes is striped over the nodes' NICs as NCCL's channels spread it
(:mod:`simcore.collectives.striping`). On a single node the tree is the chain. Latency (NCCL's
model): up and down the chain (2(g-1) intra-node hops) and the tree (twice its depth in
node-crossing hops).

Tree shapes follow NCCL's ncclGetBtree/ncclGetDtree (src/graph/trees.cc): tree 1 is the
in-order binary tree rooted at 0; tree 2 is its mirror (even size) or its shift by one (odd).
"""

from __future__ import annotations

from simcore.collectives.plan import Move, Phase, PlanContext, empty_phase, hops_for, merged_transfers
from simcore.collectives.striping import host_nics, striped_moves

__all__ = ["all_reduce", "btree_parent", "dtree_depth", "dtree_parent"]


def btree_parent(index: int, count: int) -> int:
    """Parent of ``index`` in NCCL's binary tree over ``count`` vertices (-1 for the root)."""
    if index == 0:
        return -1
    bit = index & -index
    up = (index ^ bit) | (bit << 1)
    return up if up < count else index ^ bit


def dtree_parent(index: int, count: int, tree: int) -> int:
    """Parent in tree 0 (binary tree) or tree 1 (mirror for even ``count``, shift for odd)."""
    if tree == 0:
        return btree_parent(index, count)
    if count % 2 == 1:
        up = btree_parent((index - 1) % count, count)
        return -1 if up == -1 else (up + 1) % count
    up = btree_parent(count - 1 - index, count)
    return -1 if up == -1 else count - 1 - up


def _depths(parents: list[int]) -> list[int]:
    depth = [-1] * len(parents)
    for start in range(len(parents)):
        path = []
        node = start
        while node != -1 and depth[node] == -1:
            path.append(node)
            node = parents[node]
        base = -1 if node == -1 else depth[node]
        for n in reversed(path):
            base += 1
            depth[n] = base
    return depth


def dtree_depth(count: int) -> int:
    """The deeper of the two trees' depths (edges from the deepest vertex to the root)."""
    return max(max(_depths([dtree_parent(i, count, t) for i in range(count)]), default=0) for t in (0, 1))


def _tree_edges(chains: list[list[str]], tree: int) -> list[tuple[str, str, bool]]:
    """(child, parent, crosses nodes) device pairs of one tree over node chains."""
    count = len(chains)
    parents = [dtree_parent(i, count, tree) for i in range(count)]
    edges: list[tuple[str, str, bool]] = []
    for i, chain in enumerate(chains):
        ordered = chain if tree == 0 else chain[::-1]
        edges.extend((ordered[j + 1], ordered[j], False) for j in range(len(ordered) - 1))
        if parents[i] != -1:
            parent_chain = chains[parents[i]]
            edges.append((ordered[0], parent_chain[0] if tree == 0 else parent_chain[-1], True))
    return edges


def all_reduce(ctx: PlanContext, size_bytes: float) -> tuple[Phase, ...]:
    """Double binary tree; across nodes, tree edges between nodes are striped over their NICs."""
    hosts = [[ctx.device(r) for r in g] for g in ctx.hosts_in_order(ctx.group)]
    multi_node = len(hosts) > 1
    nics = dict(zip((h[0] for h in hosts), host_nics(ctx, hosts), strict=True)) if multi_node else {}
    head_of = {d: h[0] for h in hosts for d in h}
    half = size_bytes / 2
    moves: list[Move] = []
    for tree in (0, 1):
        edges = _tree_edges(hosts, tree)
        for child, parent, crosses in edges:
            for src, dst in ((child, parent), (parent, child)):
                if crosses and multi_node:
                    moves.extend(striped_moves(src, dst, half, nics[head_of[src]], nics[head_of[dst]]))
                else:
                    moves.append((src, dst, (), half))
    transfers = merged_transfers(ctx, moves)
    if not transfers:
        return (empty_phase("tree all_reduce", "tree"),)
    chain = max(len(h) for h in hosts)
    intra, inter = 2 * (chain - 1), 2 * dtree_depth(len(hosts))
    hops = hops_for(ctx, "tree", transfers, intra, inter)
    return (Phase("tree all_reduce", transfers, hops, max(1, intra + inter)),)
