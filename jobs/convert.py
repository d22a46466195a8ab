"""Ray job: convert raw inputs to a canonical corpus.

    ray job submit --working-dir . -- python jobs/convert.py INPUT... --preset snli --out s3://bucket/corpus
"""
from _common import parser

from refinery.corpus import convert
from refinery.pipeline.engine import ray_init
from refinery.schema import resolve_mapping

if __name__ == "__main__":
    args = parser(__doc__).parse_args()
    ray_init()  # joins the job's cluster; fails early if the cluster is unreachable
    manifest = convert(args.inputs, args.out, resolve_mapping(args.preset, args.mapping))
    print(f"wrote {manifest['rows']} rows, {manifest['rejected']} rejected to {args.out}")
