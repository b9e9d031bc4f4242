"""Report the fit of gpu.block_scaled_gemm_ratio (the share of per-tensor FP8's GEMM efficiency a block-scaled
MXFP8 GEMM reaches on Blackwell): the pairs of one job in two precisions from two sources (torchtitan bf16 ->
MXFP8, Megatron-Bridge FP8-CS -> MXFP8), per source in sample and leave-one-source-out, and every pair.

The fit is product code (vtrain.calibration.block_scaled) and is written by the one calibration command:

    python bench/fit_block_scaled.py                                          # this report only
    python -m vtrain task=calibrate calibrate.scope=all calibrate.write=true  # fits and writes it (with the rest)
"""
from __future__ import annotations

import sys
from typing import List, Optional

from vtrain.calibration import block_scaled
from vtrain.io.args import ArgumentParser


def main(argv: Optional[List[str]] = None) -> int:
    ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    pairs = block_scaled.load_pairs()
    ratio = block_scaled.fit(block_scaled.fitted_pairs(pairs))
    print("\n".join(block_scaled.report(pairs, ratio, block_scaled.shipped_ratio())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
