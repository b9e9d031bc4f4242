"""docs/configs.md holds the table of valid ranges exactly as vtrain.config.domains_doc renders it from the code,
and the table covers every numeric field of the model, cluster, parallelism and training specs."""
import dataclasses
from pathlib import Path

from vtrain.config.domains_doc import BEGIN, END, all_rows, render
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import ParallelPlan

DOC = Path(__file__).resolve().parents[2] / "docs" / "configs.md"


def test_the_docs_page_holds_the_rendered_table():
    text = DOC.read_text()
    assert render() in text, "run: python -m vtrain.config.domains_doc --write docs/configs.md"
    assert text.count(BEGIN) == 1 and text.count(END) == 1


def test_every_numeric_field_has_a_row_with_a_bound():
    keys = {k: v for _, rows in all_rows() for k, _, v, _ in rows}
    numeric = [(f"model.{f.name}", f) for f in dataclasses.fields(ModelSpec)] + \
              [(f"{f.metadata['group']}.{f.name}", f) for f in dataclasses.fields(ParallelPlan)]
    for key, f in numeric:
        if f.type in ("int", "float", "Optional[float]", "Optional[int]"):
            assert key in keys, key
    # the plausibility bounds of issue 41: a range with an upper end on every count of the model
    assert keys["model.num_layers"] == "an integer in [1, 10000]"
    assert keys["model.vocab_size"] == "an integer in [1, 16777216]"
    assert keys["training.global_batch_size"] == "an integer in [1, 16777216]"
    assert keys["pricing.usd_per_gpu_hour.<gpu>"] == "a finite number in [0, 1000]"
