"""Joining a collector's per-step TensorDicts into one batch, fast.

``torch.stack`` of TensorDicts looks every entry up through the public API and validates
the result: for a thousand small steps that costs a tenth of a CartPole step per frame.
The steps a collector produces share one structure, so a batch is one ``torch.stack`` per
leaf over the steps' own dicts (private, as the env's hot path uses them), wrapped without
re-validation. Parts that are not plain TensorDicts take the public path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["cat_parts", "stack_steps"]


def stack_steps(steps: list[TensorDictBase], template: TensorDictBase, dim: int) -> TensorDict:
    """Stack ``steps`` along batch dim ``dim``, keeping exactly the keys of ``template``.

    Every step must hold at least the entries of ``template`` (a step's extra entries are
    left out), with the same shapes and devices; a missing entry raises ``KeyError``.
    """
    size = template.batch_size
    return _join(steps, template, torch.stack, dim,
                 torch.Size((*size[:dim], len(steps), *size[dim:])))


def cat_parts(parts: list[TensorDictBase], dim: int) -> TensorDict:
    """Concatenate TensorDicts of one structure along batch dim ``dim``."""
    if len(parts) == 1:
        return parts[0]
    size = parts[0].batch_size
    length = sum(part.batch_size[dim] for part in parts)
    return _join(parts, parts[0], torch.cat, dim,
                 torch.Size((*size[:dim], length, *size[dim + 1:])))


def _join(parts: list[TensorDictBase], template: TensorDictBase,
          join: Callable[..., torch.Tensor], dim: int, size: torch.Size) -> TensorDict:
    if not all(type(part) is TensorDict for part in parts):
        keys = list(template.keys(include_nested=True, leaves_only=True))
        return join([part.select(*keys, strict=True) for part in parts], dim)
    out = {}
    for key, value in template._tensordict.items():
        values = [part._tensordict[key] for part in parts]
        if isinstance(value, TensorDictBase):
            inner = value.batch_size
            out[key] = _join(values, value, join, dim,
                             torch.Size((*size, *inner[len(template.batch_size):])))
        else:
            out[key] = join(values, dim)
    return TensorDict._new_unsafe(out, batch_size=size, device=template.device)
