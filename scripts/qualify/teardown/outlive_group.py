"""Positive control for the teardown loop: a rank that exits while gloo still holds its tensors.

Each rank starts collectives on tensors it then drops, and exits without waiting: a gloo
worker thread lets go of a tensor while Python shuts down. run_loop.sh must see the abort
this produces ("terminate called without an active exception", SIGABRT), which shows the
loop's detector catches the failure it counts.
"""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
tensors = [torch.ones(1 << 16) for _ in range(20)]
works = [dist.all_reduce(t, async_op=True) for t in tensors]
del tensors, works
