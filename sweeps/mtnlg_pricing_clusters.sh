#!/usr/bin/env bash
# Case study 1 under two price lists: does the cost-optimal MT-NLG plan depend on the $/GPU-hour?
# (cost scales linearly with the price, so the ranking must not change: a quick sanity sweep.)
exec python -m vtrain -m +casestudy=mtnlg_parallel pricing=aws_on_demand,lambda_reserved "$@"
