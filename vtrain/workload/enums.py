"""Enumerations shared by the config schema and the simulator."""
from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A string enum that OmegaConf accepts (subclass of ``Enum``) and compares to ``str``."""

    def __str__(self) -> str:  # pragma: no cover - trivial
        return str(self.value)


class Schedule(StrEnum):
    ONE_F_ONE_B = "1f1b"
    GPIPE = "gpipe"
    INTERLEAVED = "interleaved"


class Recompute(StrEnum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class Precision(StrEnum):
    FP16 = "fp16"
    BF16 = "bf16"
    FP32 = "fp32"


class NormType(StrEnum):
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class PositionEmbedding(StrEnum):
    LEARNED = "learned"
    ROPE = "rope"


class CostModelKind(StrEnum):
    ANALYTICAL = "analytical"
    PROFILE = "profile"
    AUTO = "auto"
