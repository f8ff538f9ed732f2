"""Gap: under FSDP2 the ``sampler`` tracker hashes each rank's local shard but records the
global shape, so cross-rank Consistency compares shards that are not meant to be equal.

Two processes (``torch.multiprocessing.spawn``, gloo on 127.0.0.1) train a
``Linear(4, 8)`` for 3 SGD steps on different data per rank, once wrapped in DDP and
once sharded with FSDP2 ``fully_shard`` (each rank holds 4 of the 8 rows), both traced
with ``--models-to-track model --model-tracker-style sampler``. The program saves each
rank's local tensors after every step. The script then

* compares each recorded value and shape with TrainCheck's ``dump_tensor`` of the local
  shard and of the full parameter (the two shards concatenated),
* learns Consistency invariants (``traincheck-infer --enable-relation
  ConsistencyRelation``) from each trace, and checks the healthy FSDP2 trace against the
  invariants learned from the healthy DDP trace (``traincheck-check``).

Run inside the TrainCheck image: ``python 06_sampler_fsdp2_shards.py`` (about 55 s of CPU).
"""

from __future__ import annotations

import glob
import json
import os
import re
import resource
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import torch
from traincheck.instrumentor.dumper import dump_tensor

TRAIN = """
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 8)
    WRAP
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(rank)
    data = torch.randn(8, 4)
    snapshots = []
    for step in range(3):
        optimizer.zero_grad()
        model(data).pow(2).sum().backward()
        optimizer.step()
        snapshots.append(
            {n.split(".")[-1]: getattr(p, "to_local", lambda p=p: p)().detach().clone()
             for n, p in model.named_parameters()}
        )
    path = os.path.join(os.environ["GAP_DIR"], f"rank{rank}.pt")
    torch.save({"pid": os.getpid(), "snapshots": snapshots}, path)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2, int(os.environ["GAP_PORT"])), nprocs=2)
"""


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``cmd`` in its own process group with a 300 s limit; return exit code and output."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
    return proc.returncode, text


def collect(work: Path, name: str, wrap: str) -> tuple[int, Path]:
    """Trace ``TRAIN`` with the wrapping statement ``wrap`` using the sampler tracker."""
    src = work / f"{name}_src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN.replace("WRAP", wrap))
    out = work / f"{name}_trace"
    env = dict(os.environ, GAP_PORT=str(free_port()), GAP_DIR=str(src))
    rc, _ = run(["traincheck-collect", "-p", str(src / "train.py"), "--output-dir", str(out),
                 "--models-to-track", "model", "--model-tracker-style", "sampler"], work, env)
    print(f"[{name}] `{wrap}`, traincheck-collect (sampler) -> exit {rc}")
    return rc, out


def param_records(out: Path) -> dict[tuple[int, str, int], dict]:
    """Sampler records keyed by (process id, parameter short name, step)."""
    found = {}
    for path in glob.glob(str(out / "trace_VAR_*.log")):
        for line in Path(path).read_text().splitlines():
            rec = json.loads(line)
            key = (rec["process_id"], rec["var_name"].split(".")[-1], rec["meta_vars"]["step"])
            found[key] = rec["attributes"]
    return found


def infer(work: Path, trace: Path, name: str) -> list[str]:
    """Consistency invariants learned from ``trace``, as their text descriptions."""
    inv = work / f"{name}_invariants.json"
    run(["traincheck-infer", "-f", str(trace), "--enable-relation", "ConsistencyRelation",
         "-o", str(inv)], work)
    lines = inv.read_text().splitlines() if inv.exists() else []
    return [json.loads(x)["text_description"] for x in lines if x.strip()]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="gap06_"))
    ddp_rc, ddp_out = collect(work, "ddp", "model = DDP(model)")
    fsdp_rc, fsdp_out = collect(work, "fsdp2", "fully_shard(model, mesh=mesh)")

    ranks = [torch.load(work / "fsdp2_src" / f"rank{r}.pt") for r in (0, 1)]
    records = param_records(fsdp_out)
    local_match = full_match = pairs = cross_rank_equal = 0
    shapes = set()
    for step in (1, 2, 3):
        for pname in ("weight", "bias"):
            shards = [rank["snapshots"][step - 1][pname] for rank in ranks]
            full = torch.cat(shards)
            hashes = []
            for rank, shard in zip(ranks, shards, strict=True):
                attrs = records[(rank["pid"], pname, step)]
                shapes.add((pname, tuple(attrs["shape"]), tuple(shard.shape)))
                pairs += 1
                local_match += attrs["data"] == dump_tensor(shard)
                full_match += attrs["data"] == dump_tensor(full)
                hashes.append(attrs["data"])
            cross_rank_equal += hashes[0] == hashes[1]
    for pname, recorded, local in sorted(shapes):
        print(f"[fsdp2] {pname}: recorded shape {list(recorded)}, local shard {list(local)}")
    print(f"[fsdp2] recorded value == hash of the local shard: {local_match}/{pairs}; "
          f"== hash of the full parameter: {full_match}/{pairs}; "
          f"(parameter, step) pairs equal across ranks: {cross_rank_equal}/{pairs // 2}")

    ddp_invs = infer(work, ddp_out, "ddp")
    fsdp_invs = infer(work, fsdp_out, "fsdp2")
    print(f"[infer] from DDP trace: {ddp_invs}")
    print(f"[infer] from FSDP2 trace: {fsdp_invs}")
    inv_file = work / "ddp_invariants.json"
    _, check_text = run(["traincheck-check", "-f", str(fsdp_out), "-i", str(inv_file),
                         "-o", str(work / "check"), "--no-html-report"], work)
    failed = re.search(r"Total failed invariants: (\d+)/(\d+)", check_text)
    failed_text = f"{failed.group(1)}/{failed.group(2)}" if failed else "check did not finish"
    failed_descr = sorted({
        m for m in re.findall(r'"text_description": "([^"]+)"',
                              (work / "check" / "fsdp2_trace" / "failed.log").read_text())
    }) if (work / "check" / "fsdp2_trace" / "failed.log").exists() else []
    print(f"[check] healthy FSDP2 trace vs DDP-learned invariants: failed {failed_text}: "
          f"{failed_descr}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"[cpu] traced runs, infer, check: {usage.ru_utime + usage.ru_stime:.0f} s")

    global_shape = all(rec != loc for _, rec, loc in shapes)
    data_param = [d for d in fsdp_invs if d.startswith("Parameter.data ")]
    if ddp_rc == 0 and fsdp_rc == 0 and local_match == pairs and global_shape:
        print(
            f"GAP sampler_fsdp2_shards: all {pairs} FSDP2 records hash the local shard "
            f"(full parameter: {full_match}/{pairs}) under the global shape; ranks agree on "
            f"{cross_rank_equal}/{pairs // 2}; Parameter.data consistency learned from FSDP2: "
            f"{'yes' if data_param else 'no'}; healthy FSDP2 vs DDP invariants: "
            f"{failed_text} failed"
        )
    else:
        print(
            f"NO GAP sampler_fsdp2_shards: local-shard hash {local_match}/{pairs}, "
            f"global shape recorded={global_shape}, exits {ddp_rc}/{fsdp_rc}"
        )


if __name__ == "__main__":
    main()
