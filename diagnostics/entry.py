"""The entry script a traced run starts instead of the task's ``train.py``.

TrainCheck 0.2.0 instruments only the main script's source: its model sampler needs a
``model = ...`` line and an ``optimizer`` line there, and step counting is injected only into
loops of that script. The task repos build both inside their trainer module, so this entry
does what the source instrumenter would, from the outside, without touching the task code:

- tags every record with the rank (``META_VARS["rank"]``; TrainCheck records pid only);
- finds the model when the first optimizer step happens (the outermost module whose
  parameters the optimizer holds), unwrapped from DDP / ``torch.compile`` so a parameter has
  the same logical name (``model.<name>``) on every rank, in every configuration and run;
- dumps all parameters after each ``optimizer.step()`` with TrainCheck's own ``VarSampler``
  (the tracker that works for one process, DDP and FSDP2) and counts steps in
  ``META_VARS["step"]``; with several ranks, a barrier first aligns the ranks' dumps in time;
- when the run observes state (``DIAG_OBSERVE_STATE=1``), also dumps the optimizer's state,
  buffers, random generators and learning rate after each step (``observe.py``), through
  TrainCheck's trace writer and with its tracing suppressed (the observation's own torch
  calls are not the program's);
- counts steps from ``DIAG_FIRST_STEP`` (a resumed run's first step is the checkpoint's), so
  the same step has the same number in a straight run and in its resume.

Both variables are removed from the environment before the task's code runs.

Then it runs the real ``train.py`` as ``__main__`` with the original arguments.
"""

from __future__ import annotations

ENTRY_NAME = "_diag_entry.py"

ENTRY_TEMPLATE = '''\
# Written by the harness's diagnostics runner into a scratch copy; never part of a diff.
import os
import runpy
import sys

_SRC = {src!r}
_MAIN = {main!r}
# TrainCheck runs the program from its output folder, and its instrumentor (inserted after
# `import torch` below) reads the selective-collection options from `instr_opts.json` there,
# by a relative path: the move to the task's folder waits until torch is instrumented.
sys.path.insert(0, _SRC)

import torch
import torch.distributed as _dist
from torch.nn.modules.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook)
from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)
from traincheck.instrumentor import VarSampler
from traincheck.instrumentor.caches import META_VARS

META_VARS["rank"] = int(os.environ.get("RANK", "0"))
META_VARS["step"] = int(os.environ.pop("DIAG_FIRST_STEP", "0"))
_OBSERVE_STATE = os.environ.pop("DIAG_OBSERVE_STATE", "") == "1"
if _OBSERVE_STATE:
    import threading

    from diagnostics.observe import state_records
    from traincheck.instrumentor.dumper import dump_trace_VAR
    from traincheck.instrumentor.tracer import suppress_tracing
    from traincheck.utils import get_timestamp_ns


_schedulers = {{}}


def _dump_state(model, optimizer):
    with suppress_tracing():
        if id(optimizer) not in _schedulers:  # one heap scan per optimizer, at its first step
            from diagnostics.observe import schedulers_of
            _schedulers[id(optimizer)] = schedulers_of(optimizer)
        for record in state_records(model, optimizer, META_VARS, pid=os.getpid(),
                                    tid=threading.current_thread().ident,
                                    time_ns=get_timestamp_ns(),
                                    schedulers=_schedulers[id(optimizer)]):
            dump_trace_VAR(record)

_roots = []
_depth = [0]
_samplers = {{}}
_models = {{}}


def _pre(module, args):
    if _depth[0] == 0 and not any(r is module for r in _roots):
        _roots.append(module)
    _depth[0] += 1


def _post(module, args, output):
    _depth[0] -= 1


_module_hooks = [register_module_forward_pre_hook(_pre), register_module_forward_hook(_post)]


def _unwrap(module):
    while True:
        if isinstance(module, torch.nn.parallel.DistributedDataParallel):
            module = module.module
        elif isinstance(getattr(module, "_orig_mod", None), torch.nn.Module):
            module = module._orig_mod
        else:
            return module


def _pick_model(optimizer):
    held = {{id(p) for group in optimizer.param_groups for p in group["params"]}}
    best, best_overlap = None, 0
    for root in _roots:
        overlap = sum(1 for p in root.parameters() if id(p) in held)
        if overlap > best_overlap:
            best, best_overlap = root, overlap
    return None if best is None else _unwrap(best)


def _opt_pre(optimizer, args, kwargs):
    # A step before any forward is not a training step: loading a checkpoint into a fresh
    # optimizer runs a zero-lr step() to create its state. The model is chosen, and steps are
    # counted, from the first step that follows a forward pass.
    if id(optimizer) in _models or not _roots:
        return
    _models[id(optimizer)] = _pick_model(optimizer)
    # Global module hooks are only needed to find the model; later code (export) runs plain.
    for handle in _module_hooks:
        handle.remove()


def _opt_post(optimizer, args, kwargs):
    # One dump per parameter per step, after the update: the sampler's constructor dumps too,
    # so it is built here (a dump before the update would carry the same step number).
    if id(optimizer) not in _models:
        return
    model = _models[id(optimizer)]
    if model is not None:
        # TrainCheck pairs ranks' values by overlapping lifetimes (>1% overlap); ranks that
        # drift apart in time would pair step k with step k-1 and "violate" cross-rank
        # consistency on healthy code. A barrier before the dump aligns the lifetimes; it
        # changes timing only, never values (checked by the transparency report).
        if _dist.is_available() and _dist.is_initialized() and _dist.get_world_size() > 1:
            _dist.barrier()
        if id(optimizer) in _samplers:
            _samplers[id(optimizer)].dump_sample()
        else:
            _samplers[id(optimizer)] = VarSampler(model, var_name="model")
        if _OBSERVE_STATE:
            _dump_state(model, optimizer)
    META_VARS["step"] += 1


register_optimizer_step_pre_hook(_opt_pre)
register_optimizer_step_post_hook(_opt_post)

os.chdir(_SRC)
sys.argv = [_MAIN] + sys.argv[1:]
runpy.run_path(_MAIN, run_name="__main__")
'''


def render_entry(src: str, main: str) -> str:
    """The entry script for a scratch copy at ``src`` whose training script is ``main``."""
    return ENTRY_TEMPLATE.format(src=src, main=main)
