"""What a framework's own recipe for a model sets, for a row that names the framework and the model but not the
setting: the cells are the recipe's, read from the framework's code (each entry cites it), and apply only where
the row leaves that cell empty.
"""
from __future__ import annotations

from typing import Dict, Mapping, Tuple

from vtrain.validation.csv_io import MeasuredRow
from vtrain.validation.names import model_name, table_key

# (framework as table_key writes its leading name, model/ config) -> the recipe's cells
RECIPE_CELLS: Mapping[Tuple[str, str], Mapping[str, str]] = {
    # Megatron-Bridge src/megatron/bridge/recipes/llama/llama3.py, llama31_405b_pretrain_config:
    # account_for_embedding_in_pipeline_split=True, account_for_loss_in_pipeline_split=True (the embedding and
    # the loss each take a layer's slot of the pipeline split: 126 layers + 2 on PP16 x VP8 is one per chunk);
    # its scripts/performance configs build on this recipe
    ("megatron_bridge", "llama3_1_405b"): {"account_for_embedding": "true", "account_for_loss": "true"},
}


def _framework(raw: str) -> str:
    """The framework's leading name as :data:`RECIPE_CELLS` keys it ("Megatron-Bridge / Megatron-Core (NeMo
    26.02)" is megatron_bridge)."""
    return table_key(raw.split("/")[0].split("(")[0])


def recipe_cells(row: MeasuredRow) -> Dict[str, str]:
    """The cells the recipe of the row's framework and model sets that the row leaves empty; {} for a row whose
    framework or model has no entry."""
    framework, model = row.get("framework"), row.get("model")
    if framework is None or model is None:
        return {}
    cells = RECIPE_CELLS.get((_framework(framework), model_name(model)), {})
    return {column: value for column, value in cells.items() if row.get(column) is None}
