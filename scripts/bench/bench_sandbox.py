"""Harness overhead vs the bare docker SDK, measured side by side in one run.

Prints two ratios (median of interleaved repetitions, so machine noise hits both sides):
- per-call exec: ``Sandbox.exec(["true"])`` vs bare ``container.exec_run(["true"])``;
- session start: ``Sandbox`` start + one exec + close (bounded tmpfs volume, hardening, root
  PID 1 with CAP_KILL, labels) vs a bare ``containers.create`` + start + ``exec_run`` + remove.
It also prints, without a bare counterpart, what ``stop_processes`` (freeze, list, kill, thaw)
adds once at the end of a session.
Usage: .venv/bin/python scripts/bench/bench_sandbox.py [--reps N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from harness.infra import images
from harness.infra.sandbox import Sandbox


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    client = images.docker_client()
    image = images.image_id(client, "control")
    labels = {"org.harness.bench": "1"}

    bare = client.containers.create(image, ["/usr/local/bin/harness-init"], network_mode="none",
                                    labels=labels)
    bare.start()
    box = Sandbox(client, image, labels=labels, name_hint="bench").start()
    try:
        exec_bare, exec_harness = [], []
        for _ in range(args.reps * 2):  # interleaved so noise lands on both
            exec_bare.append(timed(lambda: bare.exec_run(["true"])))
            exec_harness.append(timed(lambda: box.exec(["true"], timeout_s=30)))
        stops = []
        for _ in range(args.reps):
            box.exec("sleep 100 >/dev/null 2>&1 &", timeout_s=30)
            stops.append(timed(box.stop_processes))
    finally:
        bare.remove(force=True)
        box.close()

    def bare_session() -> None:
        c = client.containers.create(image, ["/usr/local/bin/harness-init"],
                                     network_mode="none", labels=labels)
        c.start()
        c.exec_run(["true"])
        c.remove(force=True)

    def harness_session() -> None:
        with Sandbox(client, image, labels=labels, name_hint="bench") as s:
            s.exec(["true"], timeout_s=30)

    start_bare, start_harness = [], []
    for _ in range(args.reps):
        start_bare.append(timed(bare_session))
        start_harness.append(timed(harness_session))

    rows = [("exec of `true`", exec_bare, exec_harness),
            ("session start+exec+remove", start_bare, start_harness)]
    print(f"{'measure':<28}{'bare ms':>10}{'harness ms':>12}{'ratio':>8}"
          f"   (medians of {args.reps}+ interleaved runs)")
    for name, b, h in rows:
        mb, mh = statistics.median(b) * 1000, statistics.median(h) * 1000
        print(f"{name:<28}{mb:>10.1f}{mh:>12.1f}{mh / mb:>8.2f}")
    print(f"{'stop_processes (1 left)':<28}{'-':>10}{statistics.median(stops) * 1000:>12.1f}")


if __name__ == "__main__":
    main()
