"""``torch.export`` of a trained model, for serving stacks that consume ATen graphs.

The exported program is the full (uncached) forward ``tokens [batch, max_seq_len] ->
logits [batch, max_seq_len, vocab]`` of a plain, unwrapped fp32 CPU model; its state dict
uses the key schema documented in ``hybridlm.model``. Downstream consumers only support a
fixed set of ATen operators, so ``exported_ops`` lists what a program uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram

from hybridlm.model import ModelArgs, Transformer


def build_export_model(args: ModelArgs, model_state: dict[str, Any]) -> Transformer:
    model = Transformer(args)
    model.load_state_dict({k: v.to(torch.float32) for k, v in model_state.items()})
    return model.eval()


def export_model(model: Transformer, batch_size: int = 1) -> ExportedProgram:
    example = torch.zeros(batch_size, model.args.max_seq_len, dtype=torch.long)
    with torch.no_grad():
        return torch.export.export(model, (example,))


def exported_ops(program: ExportedProgram) -> set[str]:
    """Names like ``aten.linear.default`` of every operator call in the exported graph.

    Python builtins (``operator.getitem``, which unpacks multi-output ops) appear by bare name.
    """
    ops = set()
    for node in program.graph.nodes:
        if node.op == "call_function":
            target = node.target
            ops.add(target.__name__ if getattr(target, "__module__", None) == "_operator"
                    else str(target))
    return ops


def write_export(path: Path, args: ModelArgs, model_state: dict[str, Any]) -> dict[str, Any]:
    """Export, save the program to ``path`` and a JSON description beside it; returns it."""
    program = export_model(build_export_model(args, model_state))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, str(path))
    info = {
        "ops": sorted(exported_ops(program)),
        "state_dict": {k: list(v.shape) for k, v in program.state_dict.items()},
    }
    path.with_suffix(".json").write_text(json.dumps(info, indent=1) + "\n")
    return info
