"""Gap: TrainCheck's default tensor hash depends only on the first row of a tensor.

Every traced tensor value (parameter ``data`` and ``grad`` in variable records) is
stored as the integer returned by ``traincheck.instrumentor.dumper.dump_tensor``, which
the variable trackers call through ``convert_var_to_dict``. This script calls that same
function on a ``[8, 4]`` parameter and on copies with one element changed by 0.5, and
counts how many of the single-element changes alter the recorded value. It also
compares two parameters that differ only in row 5, and a ``[4, 2, 3, 3]`` convolution
weight (reshaped to ``[-1, 3]`` before hashing).

Run inside the TrainCheck image: ``python 01_tensor_hash_row0.py`` (no trace needed).
"""

from __future__ import annotations

import torch
from traincheck.instrumentor.dumper import convert_var_to_dict, dump_tensor


def recorded_value(param: torch.nn.Parameter) -> object:
    """The ``data`` attribute a TrainCheck variable record stores for ``param``."""
    return convert_var_to_dict(param)["data"]


def sensitive_positions(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Element positions whose change by 0.5 changes the recorded hash."""
    torch.manual_seed(0)
    base = torch.randn(shape)
    base_hash = dump_tensor(base)
    found = []
    for flat in range(base.numel()):
        changed = base.clone()
        changed.view(-1)[flat] += 0.5
        if dump_tensor(changed) != base_hash:
            found.append(tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), shape)))
    return found


def main() -> None:
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(8, 4))
    b = torch.nn.Parameter(a.detach().clone())
    with torch.no_grad():
        b[5] += 1.0  # rows 0-4 and 6-7 identical, row 5 differs by 1.0 everywhere
    c = torch.nn.Parameter(a.detach().clone())
    with torch.no_grad():
        c[0, 0] += 1.0  # control: a change in row 0

    print("max |a - b| =", float((a - b).detach().abs().max()), "(row 5 only)")
    print("recorded data a:", recorded_value(a))
    print("recorded data b:", recorded_value(b))
    print("recorded data c (row 0 changed):", recorded_value(c))

    linear = sensitive_positions((8, 4))
    conv = sensitive_positions((4, 2, 3, 3))
    print(f"[8, 4]: {len(linear)} of 32 single-element changes alter the hash: {linear}")
    print(f"[4, 2, 3, 3]: {len(conv)} of 72 single-element changes alter the hash: {conv}")

    row5_invisible = recorded_value(a) == recorded_value(b)
    row0_visible = recorded_value(a) != recorded_value(c)
    if row5_invisible and row0_visible and len(linear) < 32:
        print(
            f"GAP tensor_hash_row0: parameters differing only in row 5 record the same hash; "
            f"{len(linear)}/32 elements of a [8, 4] tensor and {len(conv)}/72 of a "
            f"[4, 2, 3, 3] tensor affect it"
        )
    else:
        print(
            f"NO GAP tensor_hash_row0: row-5 change visible={not row5_invisible}, "
            f"{len(linear)}/32 and {len(conv)}/72 elements affect the hash"
        )


if __name__ == "__main__":
    main()
