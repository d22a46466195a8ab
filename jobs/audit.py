"""Ray job: audit a corpus as a Ray Data pipeline (partial states per batch, merged).

    ray job submit --working-dir . -- python jobs/audit.py CORPUS... --out s3://bucket/audit [--counting sketch]
"""
from _common import parser

from refinery.audit import AuditConfig, audit, write_outputs
from refinery.schema import resolve_mapping

if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--counting", default="exact", choices=["exact", "sketch"])
    p.add_argument("--k", type=int, default=20)
    args = p.parse_args()
    config = AuditConfig(mode=args.counting, k=args.k)
    result = audit(args.inputs, resolve_mapping(args.preset, args.mapping), config=config, engine="ray")
    summary = write_outputs(result, args.out, args.inputs)
    print(f"audited {summary['rows']} rows; max z per label: {summary['max_z']}")
