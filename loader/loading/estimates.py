"""Online estimates of a table's processing-time model: duration = overhead + alpha * length.

Each finished batch gives one observation (batch length in seconds of data, measured
duration). An exponentially weighted least-squares fit (forgetting factor ``decay``)
tracks drift, e.g. a table whose rows grow wider. With too little spread in lengths
to separate the two terms, alpha keeps its previous value and overhead absorbs the rest.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CostEstimate:
    alpha: float
    overhead: float
    decay: float = 0.9
    observations: int = 0
    _w: float = 0.0
    _x: float = 0.0
    _y: float = 0.0
    _xx: float = 0.0
    _xy: float = 0.0

    def observe(self, length: float, duration: float) -> None:
        d = self.decay
        self._w = d * self._w + 1.0
        self._x = d * self._x + length
        self._y = d * self._y + duration
        self._xx = d * self._xx + length * length
        self._xy = d * self._xy + length * duration
        self.observations += 1
        mean_x = self._x / self._w
        mean_y = self._y / self._w
        var_x = self._xx / self._w - mean_x * mean_x
        if self.observations >= 3 and var_x > 1e-9 * max(1.0, mean_x * mean_x):
            slope = (self._xy / self._w - mean_x * mean_y) / var_x
            self.alpha = max(0.0, slope)
        self.overhead = max(0.0, mean_y - self.alpha * mean_x)

    def predict(self, length: float) -> float:
        return self.overhead + self.alpha * length
