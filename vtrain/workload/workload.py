"""The typed input of one simulation: model, plan, cluster and what a run of it costs."""
from __future__ import annotations

from dataclasses import dataclass

from vtrain.workload import bounds as B
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan
from vtrain.workload.stack import StackSpec
from vtrain.workload.system import ClusterSpec

# Defaults of the pricing config's energy fields (README: Energy).
# EIA, "How much carbon dioxide is produced per kilowatthour of U.S. electricity generation?" (FAQ): 2022
# utility-scale generation, 1.65e9 t CO2 / 4.23e12 kWh = 0.39 kg/kWh (0.86 lb/kWh), the US average.
GRID_KG_CO2_PER_KWH = 0.39
# EIA, Electric Power Annual 2023, average revenue per kWh by state and sector: Virginia (the largest US
# data-center market, AWS us-east-1) industrial 8.92 cents/kWh (commercial 8.95).
USD_PER_KWH = 0.0892
USD_PER_GPU_HOUR = B.USD_PER_GPU_HOUR  # the ranges of the price list: vtrain.workload.bounds
USD_PER_KWH_RANGE = B.USD_PER_KWH
KG_CO2_PER_KWH_RANGE = B.KG_CO2_PER_KWH


@dataclass(frozen=True, slots=True)
class Workload:
    model: ModelSpec
    plan: ParallelPlan
    cluster: ClusterSpec
    stack: StackSpec
    usd_per_gpu_hour: float
    cost_model: str = "analytical"
    usd_per_kwh: float = USD_PER_KWH  # energy price (on-premises); a cloud GPU-hour price already includes it
    grid_kg_co2_per_kwh: float = GRID_KG_CO2_PER_KWH
    include_energy: bool = False  # pricing.include_energy: cost_usd adds energy_kwh x usd_per_kwh

    @property
    def tokens_to_train(self) -> float:
        return self.plan.tokens_to_train
