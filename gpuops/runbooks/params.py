"""A runbook's typed parameters (pure): what each type accepts, checked the same way for a
declared default, a `--param k=v` on the command line and a value from the Prefect UI form.

References to cluster objects (node, node pool, namespace, workload, InferencePool) are
checked here for their form only (a DNS name, `namespace/name`); whether the object exists is
a question for the cluster, asked by the engine before any step runs.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = rf"{DNS_LABEL}(\.{DNS_LABEL})*"
IDENTIFIER = r"[a-z_][a-z0-9_]*"
_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_UNITS = (3600, 60, 1)


def parse_duration(text: str | int) -> int:
    """`90s`, `5m`, `1h30m` (or a plain number of seconds) -> seconds; `ValueError` otherwise."""
    if isinstance(text, int) and not isinstance(text, bool) and text >= 0:
        return text
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration: write it like `90s`, `5m` or `1h30m`")
    return sum(int(part or 0) * unit for part, unit in zip(match.groups(), _UNITS, strict=True))


class ParamBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = ""
    required: bool = False
    default: Any = None

    @model_validator(mode="after")
    def _default_fits(self) -> ParamBase:
        if self.required and self.default is not None:
            raise ValueError("a required parameter cannot have a default: drop `required` "
                             "or `default`")
        return self

    def check(self, value: Any) -> Any:
        """`value` as this type holds it; `ValueError` (or `TypeError`) saying what is
        wrong otherwise."""
        raise NotImplementedError


    def json_schema(self) -> dict[str, Any]:
        """This parameter in a Prefect deployment's parameter schema (the UI form)."""
        raise NotImplementedError

    def sample(self) -> Any:
        """A value of this type, for checking where a templated argument goes."""
        return self.default if self.default is not None else self._sample()

    def _sample(self) -> Any:
        raise NotImplementedError


class StringParam(ParamBase):
    type: Literal["string"]
    pattern: str | None = Field(None, description="A regular expression the whole value "
                                "must match.")

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"pattern {pattern!r} is not a regular expression: "
                                 f"{e}") from None
        return pattern

    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not a string")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise ValueError(f"{value!r} does not match the pattern {self.pattern!r}")
        return value


    def json_schema(self) -> dict[str, Any]:
        return {"type": "string", **({"pattern": self.pattern} if self.pattern else {})}

    def _sample(self) -> str:
        return "x"


class _Number(ParamBase):
    minimum: float | None = None
    maximum: float | None = None

    @model_validator(mode="after")
    def _bounds_in_order(self) -> _Number:
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum} is above maximum {self.maximum}")
        return self

    def _bounded(self, value: float) -> None:
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{value} is below the minimum {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"{value} is above the maximum {self.maximum:g}")

    def _bounds_schema(self) -> dict[str, Any]:
        return {k: v for k, v in (("minimum", self.minimum), ("maximum", self.maximum))
                if v is not None}

    def _sample(self) -> Any:
        return self.minimum if self.minimum is not None else \
            self.maximum if self.maximum is not None else 0


class IntParam(_Number):
    type: Literal["int"]

    def _sample(self) -> int:
        return int(super()._sample())

    def check(self, value: Any) -> int:
        if isinstance(value, str) and re.fullmatch(r"[-+]?\d+", value.strip()):
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{value!r} is not an integer")
        self._bounded(value)
        return value


    def json_schema(self) -> dict[str, Any]:
        return {"type": "integer", **self._bounds_schema()}


class FloatParam(_Number):
    type: Literal["float"]

    def check(self, value: Any) -> float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TypeError(f"{value!r} is not a number")
        self._bounded(float(value))
        return float(value)


    def json_schema(self) -> dict[str, Any]:
        return {"type": "number", **self._bounds_schema()}


class BoolParam(ParamBase):
    type: Literal["bool"]

    def check(self, value: Any) -> bool:
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
            return value.lower() in ("true", "yes")
        if not isinstance(value, bool):
            raise TypeError(f"{value!r} is not true or false")
        return value


    def json_schema(self) -> dict[str, Any]:
        return {"type": "boolean"}

    def _sample(self) -> bool:
        return False


class EnumParam(ParamBase):
    type: Literal["enum"]
    values: list[str] = Field(min_length=1, description="The values allowed.")

    @model_validator(mode="after")
    def _values_unique(self) -> EnumParam:
        if len(set(self.values)) != len(self.values):
            raise ValueError("values: each value once")
        return self

    def check(self, value: Any) -> str:
        if value not in self.values:
            raise ValueError(f"{value!r} is not one of {', '.join(map(repr, self.values))}")
        return str(value)


    def json_schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.values)}

    def _sample(self) -> str:
        return self.values[0]


class DurationParam(ParamBase):
    type: Literal["duration"]
    minimum: str | None = Field(None, description="The shortest allowed, e.g. `30s`.")
    maximum: str | None = Field(None, description="The longest allowed, e.g. `2h`.")

    @model_validator(mode="after")
    def _bounds_are_durations(self) -> DurationParam:
        for bound in (self.minimum, self.maximum):
            if bound is not None:
                parse_duration(bound)
        return self

    def check(self, value: Any) -> int:
        """Seconds."""
        seconds = parse_duration(value)
        if self.minimum is not None and seconds < parse_duration(self.minimum):
            raise ValueError(f"{value!r} is shorter than the minimum {self.minimum}")
        if self.maximum is not None and seconds > parse_duration(self.maximum):
            raise ValueError(f"{value!r} is longer than the maximum {self.maximum}")
        return seconds


    def json_schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": r"^(\d+h)?(\d+m)?(\d+s)?$|^\d+$"}

    def _sample(self) -> int:
        return parse_duration(self.minimum) if self.minimum else 60


class _Reference(ParamBase):
    """A cluster object by name: its form here, its existence at run time."""

    form: ClassVar[str] = DNS_SUBDOMAIN
    what: ClassVar[str] = "a DNS subdomain name (lower case, digits, `-` and `.`)"

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not re.fullmatch(self.form, value):
            raise ValueError(f"{value!r} is not {self.what}")
        return value


    def json_schema(self) -> dict[str, Any]:
        return {"type": "string", "pattern": f"^{self.form}$"}

    def _sample(self) -> str:
        return "x" if "/" not in self.what else "x/x"


class NodeParam(_Reference):
    type: Literal["node"]


class NodePoolParam(_Reference):
    type: Literal["nodepool"]


class NamespaceParam(_Reference):
    type: Literal["namespace"]
    form = DNS_LABEL
    what = "a namespace name (a DNS label: lower case, digits and `-`)"


class WorkloadParam(_Reference):
    """`namespace/name` of a Deployment or StatefulSet (`kind` says which)."""

    type: Literal["workload"]
    kind: Literal["Deployment", "StatefulSet"] = "Deployment"
    form = rf"{DNS_LABEL}/{DNS_SUBDOMAIN}"
    what = "`namespace/name`"


class InferencePoolParam(_Reference):
    """`namespace/name` of an InferencePool."""

    type: Literal["inferencepool"]
    form = rf"{DNS_LABEL}/{DNS_SUBDOMAIN}"
    what = "`namespace/name`"


Parameter = Annotated[
    StringParam | IntParam | FloatParam | BoolParam | EnumParam | DurationParam | NodeParam
    | NodePoolParam | NamespaceParam | WorkloadParam | InferencePoolParam,
    Field(discriminator="type"),
]
PARAMETER_TYPES = ("string", "int", "float", "bool", "enum", "duration", "node", "nodepool",
                   "namespace", "workload", "inferencepool")
