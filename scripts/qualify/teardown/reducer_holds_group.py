"""The teardown hang made certain: a gloo group whose last reference goes with DDP's reducer.

Run from the root of a task's repo with torchrun (two ranks); it calls the packet's own
`setup("gloo-ddp-2")` and `teardown`. It stages the one interleaving that hangs a rank, so
that a teardown which can hang does hang, every run, in seconds:

- A DDP module holds a second gloo group, and the module is cyclic garbage at teardown, as
  the packets' modules are after training (only a collection frees it). Its C++ reducer is
  bound to Python with a plain holder, so when it goes, it goes with the GIL held.
- An all-reduce on that group is still in flight on rank 1 when its teardown starts (rank 0
  joins it 1.5 s late, after the teardown's barrier), and its tensor's last reference is the
  collective's own: when the gloo worker finishes it, the worker lets go of a tensor Python
  made, which takes the GIL.
- If `destroy_process_group()` runs before that garbage is collected, the reducer holds the
  group's last reference, and the collection destroys the group with the GIL held: its
  destructor joins the worker, and the worker waits for the GIL (pytorch/pytorch#56297).
  Rank 1 then waits forever with every thread asleep, after rank 0 has finished, as in the
  hang seen in graded public tests.

Collecting first lets the reducer go while the process-group registry still holds the
group; `destroy_process_group()` then drops its last reference through the binding that
releases the GIL, and the group's destructor waits out the collective (about 1.5 s).

A rank still running after WATCHDOG_S writes every thread's stack and exits 1, so a hang is a
failure with its stacks, not a stalled test. Each rank prints `rank<r> done` at the end.
"""

from __future__ import annotations

import faulthandler
import gc
import inspect
import os
import sys
import time

import torch
import torch.distributed as dist

WATCHDOG_S = 60.0
LATE_S = 1.5

# The packet's own teardown is what is under test; automatic collection could free the
# module early and hide the interleaving, so only the teardown's collections run.
gc.disable()
sys.path.insert(0, os.getcwd())
try:
    from tinylm.distributed import parallelize, setup, teardown
except ImportError:
    from hybridlm.parallel import parallelize, setup, teardown  # type: ignore[no-redef]

faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
runtime = setup("gloo-ddp-2")
rank = dist.get_rank()
# The teardown's barrier waits for the default group's earlier collectives, so it runs on a
# group of its own here, and the late collective stays in flight on the default group.
aside = [dist.new_group(backend="gloo")]


def train() -> None:
    model = parallelize(torch.nn.Linear(8, 8), runtime)
    model(torch.randn(4, 8)).sum().backward()
    model.cycle = [model]  # cyclic garbage once this returns, as the packets' modules are


train()
real_barrier = dist.barrier
if rank == 1:
    work = dist.all_reduce(torch.randn(1 << 22), async_op=True)
    del work

    def barrier_aside(*args: object, **kwargs: object) -> None:
        dist.barrier = real_barrier
        real_barrier(group=aside.pop())

    dist.barrier = barrier_aside
else:
    def barrier_aside_then_join_late(*args: object, **kwargs: object) -> None:
        dist.barrier = real_barrier
        real_barrier(group=aside.pop())
        time.sleep(LATE_S)
        dist.all_reduce(torch.randn(1 << 22))

    dist.barrier = barrier_aside_then_join_late

if inspect.signature(teardown).parameters:
    teardown(runtime)
else:
    teardown()
faulthandler.cancel_dump_traceback_later()
print(f"rank{rank} done", flush=True)
