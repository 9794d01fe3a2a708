"""What a pool's change of size means, shared by the pre-warm targets and the raises for
pending pods: a dataclass with `current`, `target` and `price_per_hour` mixes this in."""

from __future__ import annotations


class PoolResize:
    current: int  # desired size now
    target: int
    price_per_hour: float

    @property
    def change(self) -> int:
        return self.target - self.current

    @property
    def cost_change_per_hour(self) -> float:
        return self.change * self.price_per_hour
