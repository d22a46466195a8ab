"""Ray job: run any pipeline file on the cluster the job was submitted to.

    ray job submit --address http://HEAD:8265 --working-dir . -- \
        python jobs/run.py examples/snli.yaml --out s3://bucket/snli-run

Stages run with the Ray engine unless ``--engine local`` is given; the pipeline's input and
``--out`` may be object-store URLs (credentials from the job's environment).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the working dir on a cluster

from refinery.pipeline.config import load_pipeline  # noqa: E402
from refinery.pipeline.engine import ray_init  # noqa: E402
from refinery.pipeline.runner import run_pipeline  # noqa: E402

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pipeline")
    p.add_argument("--out")
    p.add_argument("--engine", choices=["local", "ray"], default="ray")
    args = p.parse_args()
    spec = load_pipeline(args.pipeline)
    if args.engine == "ray":
        ray_init()  # joins the job's cluster; fails early if it is unreachable
    run = run_pipeline(spec, args.out, args.engine)
    if not all(s.result.balanced for s in run.stages):
        sys.exit("a stage's rows do not add up")
    print(f"pipeline finished: {len(run.stages)} steps under {run.out}")
