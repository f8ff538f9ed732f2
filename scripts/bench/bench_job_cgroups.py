"""What a cgroup per candidate job costs, side by side, in the grader image.

One grader container with the host's job cgroups delegated (``harness.infra.job_cgroups``;
the script says so and stops on a host that cannot give them). A job here is what a short
hidden-check step is: a new job folder, one candidate process (``python -c pass``, a fresh
interpreter as a training run's is), and the end of the job (``sealed.end_job``: the kill,
the cleanup, the seal). Each repetition runs the job once with its own cgroup (the root
launcher, the freeze-kill-thaw rounds, then the uid reaper) and once without (the variable
unset in the judge's process: ``Popen`` switches the uid, the uid reaper alone ends it),
alternating so the shared machine's noise lands on both sides. Reported: the median start-to-
exit of the candidate process and of the job's end, and their ratios.

Usage: .venv/bin/python scripts/bench/bench_job_cgroups.py [--reps 40]
"""

from __future__ import annotations

import argparse
import json
import statistics

from harness.infra import images
from harness.oracle.grade import JUDGE_USER, grader_sandbox

JOBS = r'''
import json, os, sys, tempfile, time
from pathlib import Path
from grading import jobcgroup, sealed
root = os.environ.get(jobcgroup.JOB_CGROUPS_VAR)
os.environ[sealed.CANDIDATE_AREA_VAR] = str(sealed.make_area(Path(tempfile.mkdtemp())))
jobcgroup.close_root()
times = {side: {"process": [], "end": []} for side in ("cgroup", "uid")}
for rep in range(REPS):
    for side in ("cgroup", "uid"):
        if side == "cgroup":
            os.environ[jobcgroup.JOB_CGROUPS_VAR] = root
        else:
            os.environ.pop(jobcgroup.JOB_CGROUPS_VAR, None)
        job = sealed.job_dir("bench")
        assert (sealed.job_cgroup() is not None) == (side == "cgroup")
        t = time.monotonic()
        sealed.candidate_run([sys.executable, "-c", "pass"], cwd=job, check=True)
        times[side]["process"].append(time.monotonic() - t)
        t = time.monotonic()
        sealed.end_job()
        times[side]["end"].append(time.monotonic() - t)
print(json.dumps(times))
'''


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    client = images.docker_client()
    with grader_sandbox(client, images.image_id(client, "grader"),
                        labels={"org.harness.bench": "1"}, name_hint="bench-job-cgroups") as box:
        assert box.job_cgroups is not None
        if box.job_cgroups.path is None:
            raise SystemExit(f"no job cgroups on this host: {box.job_cgroups.reason}")
        result = box.exec(["python", "-c", JOBS.replace("REPS", str(args.reps))],
                          timeout_s=1800, user=JUDGE_USER)
    if result.exit_code != 0:
        raise SystemExit(result.output[-3000:])
    times = json.loads(result.output.strip().splitlines()[-1])
    print(f"{args.reps} jobs per side, alternating; medians in ms")
    print("| | with a job cgroup | uid reaper only | ratio |")
    print("|---|---|---|---|")
    for what in ("process", "end"):
        with_cg = statistics.median(times["cgroup"][what]) * 1000
        without = statistics.median(times["uid"][what]) * 1000
        print(f"| {what} | {with_cg:.1f} | {without:.1f} | {with_cg / without:.2f} |")
    total_with = statistics.median(
        [a + b for a, b in zip(times["cgroup"]["process"], times["cgroup"]["end"], strict=True)])
    total_without = statistics.median(
        [a + b for a, b in zip(times["uid"]["process"], times["uid"]["end"], strict=True)])
    print(f"| job | {total_with * 1000:.1f} | {total_without * 1000:.1f} | "
          f"{total_with / total_without:.2f} |")


if __name__ == "__main__":
    main()
