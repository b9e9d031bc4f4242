"""What a framework's own recipe for a model sets, for a row that names the framework and the model but not the
setting: the cells are the recipe's, read from the framework's code (each entry cites it), and apply only where
the row leaves that cell empty and, for a recipe tied to one layout, where the row states that layout.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Tuple

from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.names import cell_number, model_name, table_key


@dataclass(frozen=True)
class Recipe:
    framework: str  # the framework's leading name as table_key writes it (:func:`_framework`)
    model: str  # the model/ config
    cells: Mapping[str, str]  # what the recipe sets
    layout: Mapping[str, int] = field(default_factory=dict)  # the cells the row must state so (empty: any layout)


RECIPES: Tuple[Recipe, ...] = (
    # Megatron-Bridge src/megatron/bridge/recipes/llama/llama3.py, llama31_405b_pretrain_config:
    # account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True (the embedding and
    # the loss each take a layer's slot of the pipeline split: 126 layers + 2 on PP16 x VP8 is one per chunk);
    # its scripts/performance configs build on this recipe, whatever their parallel sizes
    Recipe("megatron_bridge", "llama3_1_405b", {"account_for_embedding": "true", "account_for_loss": "true"}),
    # NeMo-Megatron-Launcher launcher_scripts/conf/training/gpt3/175b.yaml (NeMo 1.x, the launcher's own tables):
    # tensor 4 x pipeline 8, micro-batch 1, global batch 2048, virtual_pipeline_model_parallel_size 12
    # ("interleaved pipeline, set to maximum"), sequence parallelism on, no activation checkpointing
    Recipe("nemo", "gpt175b", {"virtual_stages": "12"},
           {"tp": 4, "pp": 8, "micro_batch": 1, "global_batch": 2048}),
)


def _framework(raw: str) -> str:
    """The framework's leading name as :class:`Recipe` keys it ("Megatron-Bridge / Megatron-Core (NeMo 26.02)" is
    megatron_bridge, "NeMo 24.05 (Megatron-Core)" nemo)."""
    words = table_key(raw.split("/")[0].split("(")[0]).split("_")
    return "_".join(w for w in words if not w.replace(".", "").isdigit())


def _states(row: MeasuredRow, layout: Mapping[str, int]) -> bool:
    """Whether the row states each cell of ``layout`` with that value."""
    for column, value in layout.items():
        raw = row.get(column)
        try:
            if raw is None or cell_number(column, raw) != value:
                return False
        except ValueError:
            return False
    return True


def recipe_cells(row: MeasuredRow) -> Dict[str, str]:
    """The cells the recipe of the row's framework and model sets that the row leaves empty; {} for a row whose
    framework and model have no recipe here, or whose layout is not the recipe's."""
    framework, model = row.get("framework"), row.get("model")
    if framework is None or model is None:
        return {}
    key = (_framework(framework), model_name(model))
    out: Dict[str, str] = {}
    for recipe in RECIPES:
        if (recipe.framework, recipe.model) == key and _states(row, recipe.layout):
            out.update({column: value for column, value in recipe.cells.items() if row.get(column) is None})
    return out
