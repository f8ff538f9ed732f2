"""hybrid-arch's executor of exported graphs (``hidden/hybrid-arch/checks/graph_exec.py``):
an operator the task's allow-list accepts but the judge cannot differentiate is the judge's
limitation, never the submission's failure; one outside the allow-list is the submission's
(the check fails, and no failing check of it can become the judge's defect); one it runs as an
equivalent differentiates as the eager module does."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from grading.errors import JudgeLimitation

GRAPH_EXEC = (Path(__file__).resolve().parents[2] / "hidden" / "hybrid-arch" / "checks"
              / "graph_exec.py")


def _graph_exec() -> ModuleType:
    spec = importlib.util.spec_from_file_location("graph_exec", GRAPH_EXEC)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    return module


class Heaviside(nn.Module):
    """ATen has no derivative for heaviside, and the judge no equivalent for it."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1.0, 1.0, 6))
        self.v = nn.Parameter(torch.full((6,), 0.5))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.heaviside(self.w[tokens % 6], self.v) * self.w


class SliceWrite(nn.Module):
    """An in-place slice write: export gives it as aten.copy, which the judge runs as an
    equivalent."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1.0, 1.0, 6))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(6, dtype=self.w.dtype)
        out[2:4] = self.w[tokens[:2] % 6] * 2.0
        return out * self.w


# An allow-list for these modules. Operators with a derivative run whether it lists them or
# not; only heaviside's place in it (added by one test) decides anything here.
CONTRACT_OPS = frozenset({"aten.mul.Tensor", "aten.index.Tensor", "aten.remainder.Scalar"})


def _run(module: nn.Module, tmp_path: Path, contract_ops: frozenset[str] = CONTRACT_OPS,
         ) -> tuple[ModuleType, torch.Tensor, dict]:
    graph_exec = _graph_exec()
    tokens = torch.arange(1, 7)
    with torch.no_grad():  # as the packets export
        # Functional ATen, as the judge accepts it (the slice write becomes aten.copy).
        program = torch.export.export(module, (tokens,)).run_decompositions({})
    torch.export.save(program, tmp_path / "model.pt2")
    program = graph_exec.load(tmp_path / "model.pt2", contract_ops)
    state = {k: v.detach().clone().requires_grad_(True) for k, v in module.state_dict().items()}
    out = program(state, tokens)
    assert torch.equal(out, module(tokens).detach())
    return graph_exec, out, state


def test_an_operator_the_judge_cannot_differentiate_is_its_limitation(tmp_path: Path) -> None:
    _, out, _ = _run(Heaviside(), tmp_path, CONTRACT_OPS | {"aten.heaviside.default"})
    with pytest.raises(JudgeLimitation, match="aten::heaviside"):
        out.sum().backward()


def test_an_operator_outside_the_allow_list_without_a_derivative_fails_the_check(
    tmp_path: Path,
) -> None:
    """A submission cannot trade its failing checks for the judge's defect with one operator
    it is not allowed (a zero-weighted heaviside changes no value): the gradient fails."""
    graph_exec, out, _ = _run(Heaviside(), tmp_path)
    with pytest.raises(graph_exec.GraphRefused, match="allow-list") as caught:
        out.sum().backward()
    assert isinstance(caught.value, AssertionError)  # a check's fail, never its crash


def test_an_operator_run_as_an_equivalent_differentiates_as_eager(tmp_path: Path) -> None:
    module = SliceWrite()
    graph_exec, out, state = _run(module, tmp_path)
    ops = graph_exec.load(tmp_path / "model.pt2", CONTRACT_OPS).ops
    assert "aten::copy" in {op.name() for op in ops}
    out.sum().backward()
    module(torch.arange(1, 7)).sum().backward()
    assert module.w.grad is not None
    assert torch.equal(state["w"].grad, module.w.grad)
