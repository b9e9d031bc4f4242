"""Fit gpu.rowwise_cutlass_gemm_ratio (the share of per-tensor FP8's GEMM efficiency that PyTorch's CUTLASS
rowwise-scaled FP8 kernel reaches) on torchtitan's per-tensor / rowwise FP8 pairs of one job: the Hopper pairs
in sample and leave-one-job-out, the B200 pair held out (vtrain.calibration.rowwise_kernel).

    python bench/fit_rowwise_kernel.py            # the report
    python bench/fit_rowwise_kernel.py --write    # and write the ratio into gpu/h100_sxm and gpu/b200
"""
from __future__ import annotations

import sys
from typing import List, Optional

from vtrain.calibration import rowwise_kernel
from vtrain.config.build import gpu_spec
from vtrain.config.compose import load_gpu_config
from vtrain.io.args import ArgumentParser


def main(argv: Optional[List[str]] = None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the fitted ratio into the gpu configs")
    args = parser.parse_args(argv)
    pairs = rowwise_kernel.load_pairs()
    ratio = rowwise_kernel.fit([p for p in pairs if p.architecture == rowwise_kernel.FITTED_ARCH])
    shipped = {arch: float(gpu_spec(load_gpu_config(gpus[0])).rowwise_cutlass_gemm_ratio)
               for arch, gpus in rowwise_kernel.WRITTEN.items()}
    print("\n".join(rowwise_kernel.report(pairs, ratio, shipped)))
    if args.write:
        print("\n".join(rowwise_kernel.write(pairs, ratio)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
