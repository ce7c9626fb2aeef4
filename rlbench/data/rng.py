"""A sampler's own random generator: seedable, created on the storage's device, checkpointed.

Samplers never draw from the global RNG, so sampling does not disturb (and is not disturbed
by) other code, and a buffer checkpoint restores the exact next draws. Without a seed, the
seed is drawn once from the global torch RNG: a globally seeded run stays reproducible.
"""

from __future__ import annotations

import torch

__all__ = ["SamplerRng"]


class SamplerRng:
    """A ``torch.Generator`` seeded with ``seed``, made lazily on the device it is used on."""

    def __init__(self, seed: int | None = None):
        if seed is None:
            seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
        self.seed = int(seed)
        self._generator: torch.Generator | None = None
        self._device: torch.device | None = None
        self._pending_state: tuple[str, torch.Tensor] | None = None

    def get(self, device: torch.device) -> torch.Generator:
        """The generator on ``device`` (a sampler serves one storage, so one device)."""
        if self._device == device:
            return self._generator
        if self._generator is not None:
            raise ValueError(
                f"this sampler draws on {self._device} but the storage is on {device}: "
                "use one sampler per storage"
            )
        generator = torch.Generator(device=device)
        generator.manual_seed(self.seed)
        if self._pending_state is not None:
            device_type, state = self._pending_state
            if device_type != device.type:
                raise ValueError(
                    f"the checkpointed sampler state comes from a {device_type} generator; "
                    f"this storage is on {device.type}"
                )
            generator.set_state(state)
            self._pending_state = None
        self._generator, self._device = generator, device
        return generator

    def state_dict(self) -> dict:
        if self._generator is not None:
            return {"seed": self.seed, "device_type": self._device.type,
                    "state": self._generator.get_state()}
        if self._pending_state is not None:
            device_type, state = self._pending_state
            return {"seed": self.seed, "device_type": device_type, "state": state.clone()}
        return {"seed": self.seed, "device_type": None, "state": None}

    def load_state_dict(self, state: dict) -> None:
        self.seed = int(state["seed"])
        self._generator, self._device, self._pending_state = None, None, None
        if state["state"] is not None:
            self._pending_state = (state["device_type"], state["state"].clone())
