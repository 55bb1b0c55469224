"""The experiment file: pydantic models loaded from YAML, with errors a person can act on.

``load_plan(path)`` returns a ``Plan`` or raises ``PlanError`` holding every problem at
once, each as ``file:line:col: field.path: what is wrong (allowed: ...)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema, create_model,
                      field_validator, model_validator)

from mitmchaos.addons.faults import REGISTRY as FAULTS
from mitmchaos.addons.faults import FaultOptions, FaultType
from mitmchaos.probes import REGISTRY as PROBES
from mitmchaos.probes import ProbeParams

PLAN_SCHEMA_ID = "mitmchaos-plan-v1"  # the schema file ships as plans/plan.schema.json


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Match(Strict):
    tool: str | None = Field(None, description="tool name; a leading * matches by suffix")
    host: str | None = Field(None, description="host name; *.example.test matches every subdomain")
    model: str | None = Field(None, description="model name, as requested by the agent")


class FaultCommon(Strict):
    match: Match = Field(default_factory=Match)
    after_calls: int = Field(0, ge=0, le=1_000_000, description="skip this many matching calls first")
    times: int | None = Field(None, ge=1, le=1_000_000, description="inject at most this many times; absent = every match")
    probability: float = Field(1.0, ge=0, le=1, description="chance that an eligible call is faulted (seeded)")

    @property
    def fault_type(self) -> FaultType:
        return FAULTS[self.id]  # type: ignore[attr-defined]

    def options(self) -> FaultOptions:
        """This fault's own options, as their model."""
        opts = self.fault_type.options
        return opts.model_validate({name: getattr(self, name) for name in opts.model_fields})

    @model_validator(mode="after")
    def _required_match(self):
        ft = self.fault_type
        if ft.requires_host and not self.match.host:
            raise ValueError(f"{ft.id} needs match.host (the host whose traffic fails)")
        if ft.requires_tool and not self.match.tool:
            raise ValueError(f"{ft.id} needs match.tool")
        return self


class ProbeCommon(Strict):
    weight: float = Field(1, gt=0, le=1000, description="weight in the resilience score")
    min_pass_rate: float | None = Field(None, ge=0, le=1, description="threshold; defaults to the plan's pass_rate")

    @property
    def probe_type(self):
        return PROBES[self.id]  # type: ignore[attr-defined]

    def params(self) -> ProbeParams:
        model = self.probe_type.params
        return model.model_validate({name: getattr(self, name) for name in model.model_fields})


def _tagged_union(registry: dict, base: type[BaseModel], options_of, prefix: str):
    members = []
    for ident, entry in registry.items():
        model = create_model(
            f"{prefix}_{ident.replace('.', '_')}",
            __base__=(base, options_of(entry)),
            id=(Literal[ident], Field(..., description=entry.effect if prefix == "Fault" else entry.passes_when)),
        )
        members.append(model)
    return Annotated[Union[tuple(members)], Field(discriminator="id")]


FaultSpec = _tagged_union(FAULTS, FaultCommon, lambda ft: ft.options, "Fault")
ProbeSpec = _tagged_union(PROBES, ProbeCommon, lambda pt: pt.params, "Probe")


NO_COST_CEILING = "a plan must have a cost_usd_above abort condition (every repetition spends real tokens)"


class Abort(Strict):
    """One abort condition: destructive_attempt, or a ceiling (cost_usd_above / wall_clock_s_above)."""

    kind: Literal["destructive_attempt", "cost_usd_above", "wall_clock_s_above"]
    value: float | None = None


def _parse_abort(item: Any) -> Any:
    allowed = "(allowed: destructive_attempt, cost_usd_above: <usd>, wall_clock_s_above: <s>)"
    if item == "destructive_attempt":
        return {"kind": item}
    if isinstance(item, str):
        raise ValueError(f"unknown abort condition {item!r} {allowed}")
    if not isinstance(item, dict) or len(item) != 1:
        raise ValueError(f"an abort condition is a name or a one-key mapping {allowed}")
    (kind, value), = item.items()
    if kind not in ("cost_usd_above", "wall_clock_s_above"):
        raise ValueError(f"unknown abort condition {kind!r} {allowed}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{kind} takes a number above 0, not {value!r}")
    return {"kind": kind, "value": float(value)}


def _ceiling_schema(kind: str, unit: str) -> dict:
    return {"type": "object", "additionalProperties": False, "required": [kind],
            "properties": {kind: {"type": "number", "exclusiveMinimum": 0, "description": unit}}}


# What the YAML holds, not the parsed Abort: editors validate the file as written.
ABORT_ITEM_SCHEMA = {"anyOf": [{"const": "destructive_attempt"}, _ceiling_schema("cost_usd_above", "USD"),
                               _ceiling_schema("wall_clock_s_above", "seconds")]}

AbortItem = Annotated[Abort, BeforeValidator(_parse_abort), WithJsonSchema(ABORT_ITEM_SCHEMA)]


class Price(Strict):
    input: float = Field(..., ge=0, description="USD per million input tokens")
    output: float = Field(..., ge=0, description="USD per million output tokens")
    cache_read: float | None = Field(None, ge=0, description="USD per million cache-read tokens (default: input/10)")
    cache_write: float | None = Field(None, ge=0, description="USD per million cache-write tokens (default: input*1.25)")


class EgressPolicy(Strict):
    mode: Literal["enforce", "observe"] = Field("enforce", description="enforce blocks; observe only records")
    allow: list[str] = Field(default_factory=list, description="hosts the agent may reach (empty = any not denied)")
    deny: list[str] = Field(default_factory=list, description="hosts the agent may not reach (wins over allow)")


class StandIn(Strict):
    """A host the proxy answers itself, so experiments run hermetically."""

    host: str = Field(..., min_length=1, description="host name or glob")
    dir: str | None = Field(None, description="serve files from this directory (relative to the plan)")
    flows: str | None = Field(None, description="replay responses from this recorded flows file")
    handler: str | None = Field(None, description="a Python handler, 'module:function' or 'file.py:function'")
    scripted_model: Literal["careful", "reckless"] | None = Field(
        None, description="answer the model API with the key-free scripted model"
    )

    @model_validator(mode="after")
    def _exactly_one(self):
        given = [k for k in ("dir", "flows", "handler", "scripted_model") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of dir, flows, handler, scripted_model")
        return self


class Plan(Strict):
    model_config = ConfigDict(extra="forbid", title="mitmchaos experiment")

    name: str = Field(..., pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", description="lowercase letters, digits and hyphens")
    description: str = ""
    agent: str = Field(..., min_length=1, description="the agent command, run through sh -c in the sandbox")
    verify: str = Field(..., min_length=1, description="exit code 0 means the task succeeded")
    repeat: int = Field(3, ge=1, le=20, description="baseline repetitions, then as many faulted ones")
    seed: int = Field(0, ge=0, le=2**63 - 1, description="fault decisions are a hash of this seed and the call")
    pass_rate: float = Field(1.0, ge=0, le=1, description="default threshold for every probe")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="confidence level of the reported intervals")
    require_confidence: bool = Field(False, description="undecided pass rates make the verdict inconclusive")
    max_faults: int | None = Field(None, ge=1, le=10_000, description="most faults injected per repetition")
    latency_budget_s: float = Field(300, ge=0, le=3600, description="most injected delay per repetition")
    faults: list[FaultSpec] = Field(..., min_length=1)  # type: ignore[valid-type]
    probes: list[ProbeSpec] = Field(..., min_length=1)  # type: ignore[valid-type]
    abort: list[AbortItem] = Field(..., min_length=1)
    sandbox_image: str | None = Field(None, description="--sandbox-image overrides it")
    policy: EgressPolicy | None = None
    prices: dict[str, Price] = Field(default_factory=dict, description="per-million-token prices by model glob")
    stand_ins: list[StandIn] = Field(default_factory=list)
    env: list[str] = Field(default_factory=list, description="extra environment variable names passed by name")

    @field_validator("env")
    @classmethod
    def _env_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return names

    @model_validator(mode="after")
    def _cost_ceiling(self):
        if not any(a.kind == "cost_usd_above" for a in self.abort):
            raise ValueError(NO_COST_CEILING)
        return self

    def abort_value(self, kind: str) -> float | None:
        for a in self.abort:
            if a.kind == kind:
                return a.value if a.value is not None else 1.0
        return None

    def threshold(self, probe) -> float:
        return probe.min_pass_rate if probe.min_pass_rate is not None else self.pass_rate


# ---------------------------------------------------------------- loading with line numbers


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    col: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.line}:{self.col}: {where}{self.message}"


class PlanError(Exception):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class _Located:
    """The YAML node tree, to turn a pydantic error location into a line and column."""

    def __init__(self, node: yaml.Node):
        self.node = node

    def find(self, loc: tuple, at_key: bool = False) -> tuple[yaml.Node, bool]:
        """The node at ``loc`` (its key with ``at_key``), or its deepest existing ancestor, and whether found."""
        node = self.node
        for i, part in enumerate(loc):
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                for key, value in node.value:
                    if key.value == part:
                        node = key if at_key and i == len(loc) - 1 else value
                        break
                else:
                    return node, False
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
            else:
                return node, False
        return node, True


def _strip_tags(loc: tuple, data: Any) -> tuple:
    """Drop the discriminator tag pydantic puts into union locations (faults.0.llm.rate_limit.x)."""
    out: list = []
    cursor = data
    for part in loc:
        if isinstance(cursor, dict) and isinstance(part, str) and part not in cursor and part == cursor.get("id"):
            continue
        out.append(part)
        if isinstance(cursor, dict):
            cursor = cursor.get(part)
        elif isinstance(cursor, list) and isinstance(part, int) and part < len(cursor):
            cursor = cursor[part]
        else:
            cursor = None
    return tuple(out)


def _allowed_keys(loc: tuple, data: Any, root: type[BaseModel]) -> list[str] | None:
    """The keys allowed in the mapping at ``loc`` (for unknown-key errors), ``id`` first."""
    annotation: Any = root
    cursor = data
    for part in loc:
        if isinstance(part, int):
            annotation = _item_type(annotation)
            cursor = cursor[part] if isinstance(cursor, list) and part < len(cursor) else None
            continue
        model = _model_in(annotation, cursor)
        field = model.model_fields.get(part) if model else None
        if field is None:
            return None
        annotation = field.annotation
        cursor = cursor.get(part) if isinstance(cursor, dict) else None
    model = _model_in(annotation, cursor)
    if model is None:
        return None
    return sorted(model.model_fields, key=lambda name: name != "id")


def _item_type(annotation: Any) -> Any:
    from typing import get_args

    for arg in [annotation, *get_args(annotation)]:
        args = get_args(arg)
        if args:
            return args[-1]
    return None


def _model_in(annotation: Any, value: Any):
    """The pydantic model an annotation leads to for ``value`` (through optionals, dicts and id tags)."""
    from typing import get_args, get_origin

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is dict:
        return None
    for arg in get_args(annotation):
        found = _model_in(arg, value)
        if found is None:
            continue
        id_field = found.model_fields.get("id")
        if id_field is not None and isinstance(value, dict) and get_args(id_field.annotation) != (value.get("id"),):
            continue
        return found
    return None


def _message(err: dict, loc: tuple, data: Any, root: type[BaseModel]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    registry = PROBES if "probes" in loc else FAULTS  # the union a tag error is about
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], data, root)
        suffix = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"unknown field {loc[-1]!r}{suffix}"
    if kind == "union_tag_invalid":
        tag = ctx.get("tag")
        noun = "fault" if registry is FAULTS else "probe"
        return f"unknown {noun} id {tag!r} (allowed: {', '.join(registry)})"
    if kind == "union_tag_not_found":
        return f"missing id (allowed: {', '.join(registry)})"
    if kind == "missing":
        return "required field is missing"
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        return f"{err['input']!r} is not allowed (allowed: {expected.replace(' or ', ', ').replace(chr(39), '')})"
    if kind == "string_pattern_mismatch" and loc[-1:] == ("name",):
        return f"{err['input']!r}: use lowercase letters, digits and hyphens (e.g. registry-down)"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        msg = f"{err['input']!r}: {msg[0].lower()}{msg[1:]}"
    return msg


class _UniqueKeyLoader(yaml.SafeLoader):
    pass


def _check_duplicates(node: yaml.Node, problems: list, file: str, path: str = "") -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set = set()
        for key, value in node.value:
            here = f"{path}.{key.value}" if path else str(key.value)
            if key.value in seen:
                problems.append(Problem(file, key.start_mark.line + 1, key.start_mark.column + 1, here,
                                        "duplicate key (the later one would silently win)"))
            seen.add(key.value)
            _check_duplicates(value, problems, file, here)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _check_duplicates(item, problems, file, f"{path}.{i}" if path else str(i))


@dataclass
class Parsed:
    """A YAML document checked against a model: the model (None when there are problems), the
    data as loaded, and every problem so far; ``problem_at`` locates more of them."""

    value: Any
    data: dict
    file: str
    located: _Located
    problems: list[Problem]

    def problem_at(self, loc: tuple, message: str, at_key: bool = False) -> Problem:
        target, _found = self.located.find(loc, at_key=at_key)
        mark = target.start_mark
        return Problem(self.file, mark.line + 1, mark.column + 1, ".".join(str(p) for p in loc), message)

    def raise_problems(self) -> None:
        if self.problems:
            self.problems.sort(key=lambda p: (p.line, p.col))
            raise PlanError(self.problems)


def parse_located(text: str, file: str, model: type[BaseModel], noun: str) -> Parsed:
    """Validate YAML text against ``model``, every problem at its file:line:col.

    Raises PlanError only when there is nothing to validate (bad YAML, an empty file, not a
    mapping); validation problems are returned, so a caller can add its own before raising.
    """
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        reason = getattr(exc, "problem", None) or str(exc)
        raise PlanError([Problem(file, line, col, "", f"YAML syntax error: {reason}")]) from None
    if node is None:
        required = [name for name, f in model.model_fields.items() if f.is_required()]
        raise PlanError([Problem(file, 1, 1, "", f"the file is empty; a {noun} needs {', '.join(required[:-1])} "
                                                 f"and {required[-1]}")])
    problems: list[Problem] = []
    _check_duplicates(node, problems, file)
    data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    if not isinstance(data, dict):
        raise PlanError([Problem(file, node.start_mark.line + 1, node.start_mark.column + 1, "",
                                 f"a {noun} is a mapping of fields, not a {type(data).__name__}")])
    parsed = Parsed(None, data, file, _Located(node), problems)
    try:
        parsed.value = model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = _strip_tags(tuple(err["loc"]), data)
            message = _message(err, loc, data, model)
            if message == NO_COST_CEILING:
                loc = ("abort",)
            problems.append(parsed.problem_at(loc, message, at_key=err["type"] == "extra_forbidden"
                                              or loc == ("abort",)))
    return parsed


def parse_plan_text(text: str, file: str = "<plan>") -> Plan:
    """Validate plan YAML text; raises PlanError with every problem found."""
    parsed = parse_located(text, file, Plan, "plan")
    abort = parsed.data.get("abort")
    if (parsed.problems and isinstance(abort, list)
            and not any(isinstance(a, dict) and "cost_usd_above" in a for a in abort)
            and not any(p.message == NO_COST_CEILING for p in parsed.problems)):
        parsed.problems.append(parsed.problem_at(("abort",), NO_COST_CEILING))
    parsed.raise_problems()
    return parsed.value


def read_yaml_file(path: Path) -> str:
    """The file's text, or PlanError located at its start."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanError([Problem(str(path), 1, 1, "", "no such file")]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError([Problem(str(path), 1, 1, "", f"cannot read the file: {exc}")]) from None


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    return parse_plan_text(read_yaml_file(path), str(path))


def plan_json_schema() -> dict:
    schema = Plan.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = PLAN_SCHEMA_ID
    return schema
