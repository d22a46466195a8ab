"""Ray job: run any pipeline file on the cluster the job was submitted to.

    ray job submit --address http://HEAD:8265 --working-dir . -- \
        python jobs/run.py examples/snli.yaml --out s3://bucket/snli-run

Stages run with the Ray engine unless ``--engine local`` is given; the pipeline's input and
``--out`` may be object-store URLs (credentials from the job's environment). The job ends as the
``refinery`` command does: an error is one ``error: …`` line (exit 2 for what the user can fix, 1
otherwise; ``REFINERY_DEBUG=1`` shows the traceback), ``ray job stop`` (SIGTERM) one ``terminated`` line
(exit 143), and a cluster that does not answer within ``--ray-timeout`` seconds fails in one line naming its
address.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the working dir on a cluster

from refinery.cli.entry import end_before_start, started  # noqa: E402

end_before_start()   # an interrupt while the imports below run: one line, not their traceback

from refinery.cli.base import ended  # noqa: E402
from refinery.pipeline.config import load_pipeline  # noqa: E402
from refinery.pipeline.cluster_address import RAY_TIMEOUT, RAY_TIMEOUT_ENV  # noqa: E402
from refinery.io.memory import budget_of_run  # noqa: E402
from refinery.pipeline.engine import ray_init  # noqa: E402
from refinery.pipeline.runner import run_pipeline  # noqa: E402
from refinery.termination import end_on_sigterm, finish_undisturbed  # noqa: E402


def seconds(text: str) -> float:
    """A number of seconds above 0, for ``--ray-timeout``."""
    value = float(text) if text.replace(".", "", 1).isdigit() else 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pipeline")
    p.add_argument("--out")
    p.add_argument("--engine", choices=["local", "ray"], default="ray")
    p.add_argument("--ray-timeout", type=seconds, metavar="SECONDS",
                   help=f"seconds the cluster may take to answer (default: {RAY_TIMEOUT_ENV}, else {RAY_TIMEOUT:g})")
    args = p.parse_args(argv)
    started()
    end_on_sigterm()   # ``ray job stop`` sends SIGTERM: the job ends as an interrupted command does
    if args.ray_timeout is not None:
        os.environ[RAY_TIMEOUT_ENV] = str(args.ray_timeout)
    spec = load_pipeline(args.pipeline)
    with budget_of_run(spec.memory_budget):   # the workers joined with the pipeline's memory budget
        if args.engine == "ray":
            ray_init()  # joins the job's cluster before any work: one that does not answer fails in one line
        run = run_pipeline(spec, args.out, args.engine)
    if not all(s.result.balanced for s in run.stages):
        print("error: a stage's rows do not add up (see the MISMATCH line above)", file=sys.stderr)
        return 1
    print(f"pipeline finished: {len(run.stages)} steps under {run.out}")
    print(f"report: {run.out}/pipeline/report.html")
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 — errors end as the command line's do
        if os.environ.get("REFINERY_DEBUG"):
            raise
        code = ended(e)
    finish_undisturbed()
    sys.exit(code)
