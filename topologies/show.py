"""``python -m topologies.show NAME_OR_FILE``: a readable summary of a cluster, optionally a PNG.

Examples::

    python -m topologies.show dgx-a100 --nodes 2
    python -m topologies.show --cluster dgx-a100 --nodes 2            # the same
    python -m topologies.show hgx-h100 --gpus 64 --fabric leaf-spine --oversubscription 2
    python -m topologies.show hgx-b200 --nodes 2 --nic-bandwidth 800Gb/s --nics-per-node 4
    python -m topologies.show my_cluster.yaml --png cluster.png
    python -m topologies.show topo.txt --gpu a10g --nic-port 40Gb/s --nodes 2   # nvidia-smi topo -m
"""

from __future__ import annotations

import argparse

from simcore.cliargs import Parser, int_range, png_file
from simcore.errors import TrainsimError, cli_entry
from simcore.limits import DEVICES_PER_NODE
from simcore.topology import Topology
from simcore.units import parse_bandwidth
from topologies import load_cluster
from topologies.builders import build_cluster, with_overrides
from topologies.cliargs import add_cluster, add_fabric, add_gpus, add_nodes
from topologies.draw import draw_png
from topologies.network import apply_network, network_overrides
from topologies.nvsmi_graph import load_capture_spec
from topologies.spec import parse_oversubscription
from topologies.summary import TopologySummary, summarise

__all__ = ["format_summary", "main"]


def _gbps(bps: float) -> str:
    return f"{bps / 1e9:.2f} GB/s" if bps < 10e9 else f"{bps / 1e9:.1f} GB/s"


def _latency(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


def format_summary(s: TopologySummary) -> str:
    """The summary as aligned text (what the CLI prints)."""
    ranks_on = ", ".join(f"{n} x {spec}" for spec, n in s.rank_devices.items())
    lines = [
        f"topology: {s.name}" + (f" (preset {s.preset})" if s.preset else ""),
        f"ranks:    {s.ranks} on {s.hosts} host(s): {ranks_on}",
        f"fabric:   {s.fabric}, oversubscription {s.oversubscription:g}:1",
        "devices:  " + ", ".join(f"{n} {kind}" for kind, n in s.devices.items()),
        "",
        "link classes (bandwidth per direction, latency one way):",
        f"  {'class':<20} {'kind':<9} {'links':>6} {'bandwidth':>12} {'latency':>10}",
    ]
    for c in s.link_classes:
        lines.append(
            f"  {c.name:<20} {c.kind:<9} {c.count:>6} {_gbps(c.bandwidth_Bps):>12} {_latency(c.latency_s):>10}"
        )
    reductions = ", ".join(
        f"{kind} ({n} switch{'es' if n > 1 else ''})" for kind, n in s.in_network_reduction.items()
    )
    lines += [
        "",
        f"injection into the fabric, host 0: {_gbps(s.injection_one_Bps)} for one GPU alone, "
        f"{_gbps(s.injection_each_Bps)} per GPU when all send",
        f"bisection bandwidth (min cut, ranks 0..{s.ranks // 2 - 1} | {s.ranks // 2}..{s.ranks - 1}, "
        f"one way): {_gbps(s.bisection_Bps)}"
        if s.ranks > 1
        else "bisection bandwidth: n/a (one rank)",
        f"in-network reduction: {reductions or 'none'}",
    ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m topologies.show", description=__doc__.splitlines()[0])
    parser.add_argument(
        "topology", nargs="?", default=None, metavar="CLUSTER",
        help="preset name, cluster spec .yaml, or nvidia-smi topo -m .txt capture (or give --cluster)",
    )  # fmt: skip
    add_cluster(parser, None)
    add_gpus(parser, None, help="ranks to place (adds servers as needed)")
    add_nodes(parser)
    add_fabric(parser)
    parser.add_argument("--oversubscription", help="leaf downlink:uplink ratio, e.g. 2 or 2:1")
    parser.add_argument("--nic-bandwidth", metavar="RATE", help="every NIC's port speed, e.g. 800Gb/s")
    parser.add_argument(
        "--nics-per-node",
        metavar="N",
        type=int_range(1, DEVICES_PER_NODE.limit),
        help="NICs in every node (topologies/network.py)",
    )
    parser.add_argument("--gpu", help="GPU model of a topo -m capture (device spec name)")
    parser.add_argument("--nic-port", help="NIC speed for a topo -m capture, e.g. 40Gb/s")
    parser.add_argument(
        "--png", type=png_file, help="also draw the graph to this PNG file (its folder is made)"
    )
    return parser


def _cluster(args: argparse.Namespace) -> str:
    """The cluster named positionally or with --cluster (one of the two, not both)."""
    if args.topology is not None and args.cluster is not None and args.topology != args.cluster:
        raise TrainsimError(
            f"two clusters given ({args.topology!r} and --cluster {args.cluster!r}); give one"
        )
    name = args.topology if args.topology is not None else args.cluster
    if name is None:
        raise TrainsimError(
            "no cluster given: name a preset or file, e.g. python -m topologies.show dgx-a100"
        )
    return str(name)


def _load(args: argparse.Namespace) -> Topology:
    ratio = (
        None
        if args.oversubscription is None
        else parse_oversubscription(args.oversubscription, "--oversubscription")
    )
    network = network_overrides(args.nic_bandwidth, args.nics_per_node)
    if args.gpu or args.nic_port:
        port = parse_bandwidth(args.nic_port) if args.nic_port else None
        spec = apply_network(load_capture_spec(_cluster(args), gpu=args.gpu, nic_port_Bps=port), network)
        fabric_type = "rail-optimised" if args.fabric == "rail-optimized" else args.fabric
        return build_cluster(
            spec, gpus=args.gpus, nodes=args.nodes, fabric=with_overrides(spec.fabric, fabric_type, ratio)
        )
    return load_cluster(
        _cluster(args),
        gpus=args.gpus,
        nodes=args.nodes,
        fabric=args.fabric,
        oversubscription=ratio,
        network=network,
    )


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.png is not None and args.png.is_dir():
        raise TrainsimError(f"--png {str(args.png)!r} is a folder; give the PNG file to write")
    topo = _load(args)
    print(format_summary(summarise(topo)))
    if args.png:
        draw_png(topo, args.png)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
