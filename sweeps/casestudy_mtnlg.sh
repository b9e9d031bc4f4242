#!/usr/bin/env bash
# Case study 1: every (tp,pp,dp) plan of MT-NLG 530B on 3,360 A100s vs the published (8,35,12). ~10 s.
# Extra Hydra overrides pass through, e.g. pricing=lambda_reserved or case_study.params.tp=[8].
exec python -m vtrain +casestudy=mtnlg_parallel "$@"
