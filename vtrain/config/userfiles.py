"""The user's config files (``--config-dir``, ``--config-path``) checked before Hydra reads them, each fault one
line naming the file, the line and the key:

- a file that YAML cannot read (bad indentation, a tab, an unclosed bracket) or that repeats a key;
- a value that is code or a place to write outside the run (:mod:`vtrain.config.trust`);
- a key or value the schema refuses (an unknown key, a wrong type), for files of the schema's groups
  (``model/``, ``cluster/``, ...) and ``# @package _global_`` files such as experiments.

The shipped configs (``vtrain/conf``) are vtrain's own and are not checked here (their tests are).
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import yaml

from vtrain.config.trust import check_key
from vtrain.errors import ConfigError

Lines = Dict[Tuple[str, ...], int]  # key path in the file -> 1-based line
_PACKAGE = re.compile(r"^#\s*@package\s+(\S+)", re.M)


def check_config_dirs(dirs: Sequence[Path]) -> None:
    """Every ``*.yaml`` file under ``dirs`` (a user's config folders): ConfigError on the first fault."""
    for root in dirs:
        for path in sorted([*root.rglob("*.yaml"), *root.rglob("*.yml")]):
            if path.is_file():
                check_file(path, root)


def check_file(path: Path, root: Path) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read as UTF-8 text ({exc})") from None
    node = _parse(path, text)
    if node is None:
        return
    lines: Lines = {}
    data = _walk(path, node, (), lines)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: line 1: a config file holds a mapping of keys (key: value), not "
                          f"{type(data).__name__}")
    prefix = _package(path, root, text)
    for keys, value in _leaves(data):
        why = check_key(".".join((*prefix, *keys)), value, from_file=True)
        if why:
            raise ConfigError(f"{path}: line {_line(lines, keys)}: {why}")
    _check_schema(path, data, prefix, lines)
    _check_domains(path, data, prefix, lines)


def _loader() -> Any:
    """OmegaConf's YAML loader (as Hydra reads the file: ``1e3`` is a float), else PyYAML's safe one."""
    try:
        from omegaconf._utils import get_yaml_loader

        return get_yaml_loader()
    except ImportError:  # pragma: no cover - omegaconf moved it
        return yaml.SafeLoader


def _parse(path: Path, text: str) -> Optional[yaml.Node]:
    try:
        return yaml.compose(text, Loader=_loader())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        problem = str(exc.problem or exc.context or "not YAML")
        if "\\t" in problem or "'\t'" in problem:
            problem = "a tab character where YAML needs spaces for indentation"
        elif "mapping values are not allowed" in problem:
            problem = "a key indented where no mapping can start (mapping values are not allowed here)"
        key = _key_before(text, line)
        raise ConfigError(f"{path}: line {line}" + (f", key {key}" if key else "") + f": {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None


def _key_before(text: str, line: int) -> str:
    """The key on ``line`` or the nearest one above it (where a parse error names no key)."""
    for ln in reversed(text.splitlines()[:line]):
        m = re.match(r"\s*-?\s*([\w.\-/@ ]+?)\s*:(\s|$)", ln)
        if m:
            return m.group(1)
    return ""


def _walk(path: Path, node: yaml.Node, keys: Tuple[str, ...], lines: Lines) -> Any:
    """The node as plain data, each key's line recorded; a key twice in one mapping is an error."""
    lines.setdefault(keys, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        out: Dict[str, Any] = {}
        for k, v in node.value:
            name = str(k.value)
            if name in out:
                raise ConfigError(f"{path}: line {k.start_mark.line + 1}, key {'.'.join((*keys, name))}: appears "
                                  f"twice in one mapping (first on line {lines[(*keys, name)]})")
            lines[(*keys, name)] = k.start_mark.line + 1
            out[name] = _walk(path, v, (*keys, name), lines)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(path, v, keys, lines) for v in node.value]
    return _loader()("").construct_object(node, deep=True)


def _leaves(data: Any, keys: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], Any]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, (*keys, k))
    elif isinstance(data, list) and any(isinstance(x, dict) for x in data):
        for x in data:
            yield from _leaves(x, keys)
    else:
        yield keys, data


def _line(lines: Lines, keys: Sequence[str]) -> int:
    for n in range(len(keys), -1, -1):
        if tuple(keys[:n]) in lines:
            return lines[tuple(keys[:n])]
    return 1


def _package(path: Path, root: Path, text: str) -> Tuple[str, ...]:
    """Where a file's keys land in the config: ``# @package`` where given, else its group folder."""
    m = _PACKAGE.search(text)
    if m:
        return () if m.group(1) == "_global_" else tuple(m.group(1).replace("/", ".").split("."))
    return tuple(path.parent.relative_to(root).parts)


def _check_schema(path: Path, data: Dict[str, Any], prefix: Tuple[str, ...], lines: Lines) -> None:
    """The file's keys merged over vtrain's schema (the root for ``_global_`` files, its group otherwise)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from vtrain.config.schema import VtrainConfig

    fields = set(VtrainConfig.__dataclass_fields__)
    body = {k: v for k, v in data.items() if k not in ("defaults", "hydra")}
    if not prefix:
        unknown = [k for k in body if k not in fields]
        if unknown:
            raise ConfigError(f"{path}: line {_line(lines, (unknown[0],))}: key {unknown[0]} is not a config key"
                              + _hint(unknown[0], sorted(fields)))
    elif prefix[0] in fields and prefix[0] != "extra" and len(prefix) == 1:
        body = {prefix[0]: body}
    else:
        return  # a group the schema does not type (hydra/, casestudy/, ...): its trust checks above only
    try:
        OmegaConf.merge(OmegaConf.structured(VtrainConfig), body)
    except OmegaConfBaseException as exc:
        full = str(getattr(exc, "full_key", "") or "")
        keys = tuple(full.split(".")) if full else ()
        in_file = keys[len(prefix):] if prefix else keys
        reason = str(exc).strip().splitlines()[0]
        raise ConfigError(f"{path}: line {_line(lines, in_file)}, key {full or '?'}: {reason}"
                          + (_hint(keys[-1], _siblings(keys)) if "not in" in reason and keys else "")) from None


def _siblings(keys: Tuple[str, ...]) -> List[str]:
    from vtrain.config.schema import VtrainConfig

    node: Any = VtrainConfig
    for k in keys[:-1]:
        f = getattr(node, "__dataclass_fields__", {}).get(k)
        if f is None:
            return []
        node = f.type if not isinstance(f.type, str) else _resolve(node, f.name)
    return sorted(getattr(node, "__dataclass_fields__", {}))


def _resolve(owner: Any, name: str) -> Any:
    import typing

    try:
        return typing.get_type_hints(owner).get(name)
    except Exception:  # a forward reference that does not resolve: no hint
        return None


def _hint(word: str, options: List[str]) -> str:
    near = difflib.get_close_matches(word, options, n=1)
    return f"; did you mean {near[0]}?" if near else ""


def _spec_domains() -> Dict[str, Any]:
    """config section -> the spec class whose field domains check its numbers."""
    from vtrain.workload.model import ModelSpec
    from vtrain.workload.plan import ParallelPlan
    from vtrain.workload.stack import StackSpec
    from vtrain.workload.system import ClusterSpec, GpuSpec, NetworkTier

    return {"model": ModelSpec, "gpu": GpuSpec, "stack": StackSpec, "cluster": ClusterSpec,
            "cluster.intra_node": NetworkTier, "cluster.inter_node": NetworkTier, "parallelism": ParallelPlan,
            "training": ParallelPlan}


def _check_domains(path: Path, data: Dict[str, Any], prefix: Tuple[str, ...], lines: Lines) -> None:
    """Each number of a spec section against its field's range (vtrain.workload.bounds), named by line."""
    import dataclasses

    from vtrain.workload.fields import Domain

    specs = _spec_domains()
    for keys, value in _leaves({k: v for k, v in data.items() if k not in ("defaults", "hydra")}):
        full = (*prefix, *keys)
        section, name = ".".join(full[:-1]), full[-1] if full else ""
        if len(full) > 2 and full[-2] not in ("intra_node", "inter_node") and ".".join(full[:-2]) in specs:
            section, name = ".".join(full[:-2]), full[-2]  # a mapping of numbers (gpu.peak_tflops.bf16)
        cls = specs.get(section)
        if cls is None or isinstance(value, (str, bool)) or not isinstance(value, (int, float)):
            continue
        if (section, name, value) == ("gpu", "peak_tflops", 0):  # 0: the GPU has no such unit (config.build.gpu_spec)
            continue
        field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
        domain = field.metadata.get("domain") if field is not None else None
        if isinstance(domain, Domain) and not domain.admits(value):
            raise ConfigError(f"{path}: line {_line(lines, keys)}: {'.'.join(full)}={value}: {domain.reason()}")
