"""grading.models.verdict_for: a grade says only what was shown."""

from __future__ import annotations

from grading.models import ContractResult, configuration_results, verdict_for
from grading.packet import CUDA_CONFIGURATIONS

DECLARED = ["cpu-1", "gloo-ddp-2", "cuda-ddp-2", "cuda-fsdp-2"]
NO_GPUS = {c: "needs 2 GPUs with NCCL; this grader has 0" for c in sorted(CUDA_CONFIGURATIONS)}


def _contract(cid: str, outcome: str, configurations: str) -> ContractResult:
    return ContractResult(id=cid, kind="hidden_check", statement="s", outcome=outcome,  # type: ignore[arg-type]
                          evidence={"properties": {"configurations": configurations}})


def _verdict(contracts: list[ContractResult], not_run: dict[str, str]) -> str:
    shown = configuration_results(contracts, DECLARED, not_run)
    return verdict_for(contracts, diff_applied=True, configurations=shown,
                       cuda=CUDA_CONFIGURATIONS)


CPU = [_contract("hidden:a", "pass", "cpu-1"), _contract("hidden:b", "pass", "gloo-ddp-2")]


def test_a_cuda_only_contract_skipped_without_gpus_leaves_cuda_undetermined() -> None:
    gpu_check = _contract("hidden:gpu", "not_run", "cuda-ddp-2, cuda-fsdp-2")
    assert _verdict([*CPU, gpu_check], NO_GPUS) == "complete_on_cpu"
    # Never complete, and a CPU contract that did not run is never excused.
    assert _verdict([*CPU, _contract("hidden:c", "not_run", "cpu-1")], NO_GPUS) == "incomplete"
    mixed = _contract("hidden:m", "not_run", "gloo-ddp-2, cuda-ddp-2")
    assert _verdict([*CPU, mixed], NO_GPUS) == "incomplete"
    # Only CUDA contracts, none run: nothing was shown at all.
    assert _verdict([gpu_check], NO_GPUS) == "incomplete"


def test_with_gpus_a_skipped_cuda_contract_is_a_failure() -> None:
    gpu_check = _contract("hidden:gpu", "not_run", "cuda-ddp-2, cuda-fsdp-2")
    assert _verdict([*CPU, gpu_check], {}) == "incomplete"
    ran = _contract("hidden:gpu", "pass", "cuda-ddp-2, cuda-fsdp-2")
    assert _verdict([*CPU, ran], {}) == "complete"
    assert _verdict([*CPU, _contract("hidden:gpu", "fail", "cuda-ddp-2")], NO_GPUS) == "incomplete"
