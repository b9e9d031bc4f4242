#!/usr/bin/env bash
# Case study 2: a 10-job trace on a shared 1,024-A100 cluster; heuristic vs vtrain-guided scheduling. ~5 s.
exec python -m vtrain +casestudy=multitenant "$@"
