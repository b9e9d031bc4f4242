#!/usr/bin/env bash
# Case study 3: model sizing for 1M GPU-hours and a 30-day deadline on 1,024 A100s; fixed MFU vs vtrain. ~5 s.
exec python -m vtrain +casestudy=compute_optimal "$@"
