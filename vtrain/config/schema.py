"""Typed schemas of every config group, registered in Hydra's ConfigStore (see ``store.py``).

A wrong key or a wrong type fails at compose time. Enumerated choices are plain ``str`` here
(OmegaConf matches enums by member name, and values such as ``1f1b`` are not identifiers); they are
checked against :mod:`vtrain.workload.enums` in :func:`vtrain.config.validate.validate`.

Units are in the field names: ``_s`` seconds, ``_bytes``, ``_gib`` (2**30 bytes),
``_gb_per_s`` (10**9 bytes/s), ``_gbit_per_s`` (10**9 bits/s), ``_tflops`` (10**12 FLOP/s).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, TypeAlias

from omegaconf import MISSING

from vtrain.config.specs import schema_of
from vtrain.workload.model import ModelSpec
from vtrain.workload.plan import PAR, TRAIN, ParallelPlan
from vtrain.workload.stack import StackSpec
from vtrain.workload.system import ClusterSpec, GpuSpec, NetworkTier
from vtrain.workload.workload import GRID_KG_CO2_PER_KWH, USD_PER_KWH

# --- schemas generated from the workload specs (one definition of each value: vtrain/workload)
if TYPE_CHECKING:  # generated classes: plain Any for the type checker
    ModelConfig: TypeAlias = Any
    GpuConfig: TypeAlias = Any
    StackConfig: TypeAlias = Any
    NetworkConfig: TypeAlias = Any
    ClusterConfig: TypeAlias = Any
    ParallelismConfig: TypeAlias = Any
    TrainingConfig: TypeAlias = Any
else:
    ModelConfig = schema_of(ModelSpec)
    GpuConfig = schema_of(GpuSpec)
    StackConfig = schema_of(StackSpec)
    NetworkConfig = schema_of(NetworkTier, name="NetworkConfig")
    ClusterConfig = schema_of(ClusterSpec, overrides={"gpu": (str, MISSING)})  # names its gpu/ config
    ParallelismConfig = schema_of(ParallelPlan, group=PAR, name="ParallelismConfig")
    _TrainingPlanConfig = schema_of(ParallelPlan, group=TRAIN, name="TrainingPlanConfig")

    @dataclass
    class TrainingConfig(_TrainingPlanConfig):
        """The plan's training fields, and where the run (tokens, sequence, batch) comes from."""

        source: str = ""  # the published run of a training/ preset; "": none (the CLI asks for the tokens)


@dataclass
class PricingConfig:
    name: str = MISSING
    source: str = ""
    usd_per_gpu_hour: Dict[str, float] = field(default_factory=dict)  # by gpu config name
    kind: str = ""  # list (on-demand) | reserved | spot
    date: str = ""  # when the prices were read
    estimates: Dict[str, str] = field(default_factory=dict)  # gpu -> why its price is an estimate (no public one)
    include_energy: bool = False  # add energy_kwh x usd_per_kwh to cost_usd (on-premises: GPU-hours + power)
    usd_per_kwh: float = USD_PER_KWH  # energy, for on-premises cost (energy_cost_usd); in cost_usd with include_energy
    grid_kg_co2_per_kwh: float = GRID_KG_CO2_PER_KWH  # grid carbon intensity (co2_kg)


@dataclass
class CostConfig:
    model: str = "auto"  # analytical | profile | auto
    profile_dir: Optional[str] = None  # None: <project>/profiles


@dataclass
class SearchConfig:
    """The plan search (vtrain/search). Every field's domain is checked by vtrain.search.settings."""

    sampler: str = "nsgaii"  # nsgaii | tpe | random | grid
    n_trials: int = 200  # COMPLETE + PRUNED trials of the study, over all its workers
    seed: int = 0
    objectives: List[str] = field(default_factory=lambda: ["time_to_train_s", "cost_usd"])
    objective_quantile: str = "mid"  # mid: the prediction | hi: the slow end of its 80% interval (pessimistic)
    study_name: Optional[str] = None
    storage: Optional[str] = None  # None: journal file in the run directory; a path (journal) or an RDB URL
    max_tp: int = 0  # 0: GPUs per node
    allow_cross_node_tp: bool = False
    micro_batch_sizes: List[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    schedules: List[str] = field(default_factory=lambda: ["1f1b", "interleaved"])
    virtual_stages: List[int] = field(default_factory=lambda: [1, 2, 4])
    recompute: List[str] = field(default_factory=lambda: ["none", "selective", "full"])
    sequence_parallel: List[bool] = field(default_factory=lambda: [False, True])
    distributed_optimizer: List[bool] = field(default_factory=lambda: [False, True])
    # issue 12 (modern parallelism). Defaults keep today's space, so the default search costs what it did;
    # presets widen them (experiment/deepseek_v3_h800.yaml). Dense models ignore ep/etp/moe_dispatchers.
    pp: Optional[List[int]] = None  # None: divisors of the layers; a list also admits uneven splits (61 layers / 16)
    zero_stages: Optional[List[int]] = None  # None: 0/1 from distributed_optimizer; e.g. [0, 1, 2, 3]
    cp: List[int] = field(default_factory=lambda: [1])  # context-parallel degrees (2*cp must divide seq_len)
    precisions: Optional[List[str]] = None  # None: training.precision; e.g. [bf16, fp8]
    ep: Optional[List[int]] = None  # MoE: None = every degree dividing num_experts (and dp*cp per plan)
    # MoE expert TP degrees: 0 = tp (Megatron-LM's CLI default), 1 = experts split by EP alone (what NVIDIA's MoE
    # recipes and torchtitan run: Megatron-Bridge scripts/performance, torchtitan expert_tensor_parallel_degree)
    etp: List[int] = field(default_factory=lambda: [0, 1])
    moe_dispatchers: Optional[List[str]] = None  # MoE: None = parallelism.moe_dispatcher
    cp_comms: Optional[List[str]] = None  # plans with cp > 1: None = parallelism.cp_comm; e.g. [p2p, allgather, a2a]
    recompute_num_layers: List[int] = field(default_factory=lambda: [0])  # recompute=full: block depths, 0 = all
    fsdp_shard_sizes: Optional[List[int]] = None  # ZeRO >= 1: None = parallelism.fsdp_shard_size; 0 = whole DP group
    reshard_after_forward: Optional[List[bool]] = None  # ZeRO-3: None = parallelism.reshard_after_forward
    max_grid_plans: int = 200_000  # sampler=grid: more is an error (GPT-3 x 1,024 A100: 47,022 plans in 8-10 s)
    # constraints: GPU counts bound the plan space; the others are Optuna constraints (near-misses guide NSGA-II)
    gpus: int = 0  # exactly this many GPUs (0: any)
    min_gpus: int = 1
    max_gpus: int = 0  # 0: the cluster's GPUs
    max_days: Optional[float] = None  # time to train the configured tokens, days
    max_cost_usd: Optional[float] = None
    max_memory_fraction: float = 1.0  # peak memory per GPU <= this share of its HBM
    min_mfu: Optional[float] = None  # model FLOPs utilisation, a fraction (0.4 = 40%)
    population_size: int = 20  # NSGA-II generation size (TPE: twice its random start-up trials); 20 measured best
    mutation_prob: Optional[float] = None  # NSGA-II per-parameter mutation; None: 1 / number of parameters
    crossover_prob: float = 0.9  # NSGA-II
    seed_population: bool = True  # NSGA-II/TPE: first generation drawn from plans that pass the memory bound
    local_search_fraction: float = 0.3  # NSGA-II/TPE: share of n_trials spent on neighbours of the front
    local_search_rounds: int = 3  # ... in this many rounds (0: pure evolutionary search)
    filter_offspring: bool = True  # NSGA-II: re-draw children that are invalid, cannot fit or were seen
    heartbeat_s: int = 10  # RDB storages: the heartbeat interval the RDBStorage is opened with (Optuna's own tools)
    stale_trial_s: float = 600.0  # a trial held longer than this is a dead worker's: taken over (trials take ms)
    worker_index: int = -1  # several workers on one study: -1 derives one (SLURM, Hydra job, process)
    workers: int = 0  # grid: simulation processes (0: one per CPU)
    progress_bar: bool = True
    top_k_artifacts: int = 2


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None  # None: sqlite:///<cwd>/outputs/mlflow.db
    experiment_name: Optional[str] = None  # None: vtrain-<model>-<cluster>; in a multirun vtrain-sweep-<sweep dir>
    child_runs: str = "all"  # all: one per trial | front: the Pareto front and top plans | none
    top_k: int = 5  # child_runs=front: also the k best plans of each objective
    max_child_runs: int = 2000  # child_runs=all: above this many trials only front and top plans get child runs
    http_timeout_s: int = 10  # remote tracking server: fail fast instead of MLflow's long retries
    description: Optional[str] = None  # added to the parent run's description (mlflow.note.content)


@dataclass
class ValidateConfig:
    data: Optional[str] = None
    stack: Optional[str] = None  # stack/ config of rows without a stack column; None: the dataset's own
    show_rows: int = 20


@dataclass
class CalibrateConfig:
    data: Optional[str] = None
    # leave-one-group-out grouping: hidden_size | num_layers | shape | micro_batch | weak_scaling | none
    folds: str = "hidden_size"
    fit_on: str = "joint"  # joint: single-node runs + weak-scaling rows, equally weighted | single_node: those alone
    constants: Optional[List[str]] = None  # the constants to fit (calibration/fit.py BOUNDS); None: fit.FITTED
    write: bool = False
    # a100: the A100 fit above (cluster, data, folds, fit_on, constants) | all: every GPU's and stack's constants
    # on every shipped source, leave-one-source-out (vtrain/cli/task_calibrate_all.py)
    scope: str = "a100"


@dataclass
class ProfileConfig:
    """task=profile (operator sweep) and task=measure (real training iterations); see profiles/README.md."""

    device: str = "cpu"  # cpu | cuda | cuda:<index>
    dtype: Optional[str] = None  # fp32 | bf16 | fp16; None: fp32 on cpu, training.precision on cuda
    out_dir: Optional[str] = None  # None: <cost.profile_dir or profiles/>/<device slug>
    gpu: Optional[str] = None  # gpu/ config this profile stands for; None: cluster.gpu, or "cpu" on cpu
    micro_batch_sizes: List[int] = field(default_factory=lambda: [1, 2])
    seq_lens: List[int] = field(default_factory=lambda: [128])
    hidden_sizes: List[int] = field(default_factory=list)  # empty: model.hidden_size (head_dim kept)
    tp_shards: List[int] = field(default_factory=lambda: [1])
    attention: List[str] = field(default_factory=lambda: ["flash", "unfused"])  # attention paths swept
    adam_layers: List[int] = field(default_factory=list)  # layer counts of the Adam sweep; empty: 1, model
    max_tensor_gib: float = 8.0  # skip sweep points whose largest tensor exceeds this
    warmup: int = 3
    repeats: int = 10
    min_sample_s: float = 0.02  # on cpu, keep sampling an op until this much time is spent (noise)
    cold_cache: bool = False  # cpu: evict the caches before every op sample (the Adam step: always)
    cpu_clock: str = "cpu"  # cpu: process CPU time (robust on a shared machine) | wall; cuda: always events/wall
    threads: int = 1  # torch threads on cpu (1: robust timings on a shared CPU); 0: torch's default
    collectives: bool = True  # time collectives with torch.distributed when >= 2 GPUs are visible
    collective_max_mib: int = 256
    import_nccl: Optional[str] = None  # nccl-tests CSV file or folder to import into the profile
    measure_iterations: int = 5
    grad_accum_steps: int = 2  # task=measure: micro-batches per iteration (global batch = mbs * this)
    validation_csv: Optional[str] = None  # task=measure: append (predicted, measured) to this CSV


@dataclass
class VtrainConfig:
    task: str = "search"  # search | simulate | validate | calibrate | profile | measure
    model: ModelConfig = MISSING
    cluster: ClusterConfig = MISSING
    gpu: Optional[GpuConfig] = None  # None: the gpu/ config named by cluster.gpu
    stack: StackConfig = MISSING  # the software stack (framework host costs): a stack/ config
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    pricing: PricingConfig = MISSING
    cost: CostConfig = field(default_factory=CostConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    calibrate: CalibrateConfig = field(default_factory=CalibrateConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    extra: Dict[str, Any] = field(default_factory=dict)
    case_study: Optional[CaseStudyConfig] = None  # task=casestudy: +casestudy=<name>


@dataclass
class CaseStudyConfig:
    """A paper case study for ``task=casestudy`` (configs in ``conf/casestudy/``). ``params`` is checked
    against the study's own schema in :mod:`vtrain.casestudies` when the study runs."""

    name: str = MISSING  # parallelization | scheduling | compute_optimal
    title: str = ""
    params: Dict[str, Any] = field(default_factory=dict)
