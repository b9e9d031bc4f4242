import os

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def gpt175b_cfg():
    from vtrain import compose

    return compose(["+model=gpt175b", "+cluster=a100x1024", "parallelism.tp=8", "parallelism.pp=16",
                    "parallelism.dp=8", "parallelism.micro_batch_size=1"])
