"""One way to write a validation failure (contract/models.py error_lines): the deployment spec,
the SLO spec, scenarios, gates and runbook parameters all say which key, what is wrong and the fix."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import Field, ValidationError, model_validator

from contract.models import Strict, error_lines


class Inner(Strict):
    port: int
    host: str = "127.0.0.1"


class Kind1(Strict):
    kind: Literal["one"]
    size_gib: float = Field(default=1.0, gt=0)


class Kind2(Strict):
    kind: Literal["two"]
    count: int = 1


class Outer(Strict):
    name: str
    inner: Inner
    items: list[Inner] = []
    pick: Kind1 | Kind2 = Field(default=Kind1(kind="one"), discriminator="kind")

    @model_validator(mode="after")
    def _rule(self) -> Outer:
        if self.name == "bad":
            raise ValueError("name 'bad' is reserved; pick another")
        return self


def lines(data: dict, **kw) -> list[str]:
    with pytest.raises(ValidationError) as err:
        Outer.model_validate(data)
    return error_lines(err.value, **kw)


def test_unknown_missing_and_wrong_values_name_the_key_and_the_fix():
    data = {"name": "n", "inner": {"prot": 1}, "items": [{"port": "x"}]}
    assert lines(data, model=Outer, schema="`tool schema`") == [
        "inner.port: required key is missing; add it (see `tool schema`)",
        "inner.prot: unknown key; did you mean 'port'?",
        "items[0].port: Input should be a valid integer, unable to parse string as an integer (got 'x')",
    ]


def test_without_the_model_an_unknown_key_still_gets_its_fix():
    assert lines({"name": "n", "inner": {"port": 1, "zzz": 1}}) == [
        "inner.zzz: unknown key; remove it or fix its spelling"]
    assert lines({"name": "n", "inner": {"port": 1, "zzz": 1}}, model=Outer) == [
        "inner.zzz: unknown key; known keys: host, port"]


def test_a_discriminated_union_member_is_found_by_its_tag():
    assert lines({"name": "n", "inner": {"port": 1}, "pick": {"kind": "two", "cuont": 2}}, model=Outer) == [
        "pick.two.cuont: unknown key; did you mean 'count'?"]


def test_a_rule_of_the_whole_input_reads_as_written_and_root_names_other_problems():
    assert lines({"name": "bad", "inner": {"port": 1}}) == ["name 'bad' is reserved; pick another"]
    with pytest.raises(ValidationError) as err:
        Outer.model_validate(["not", "a", "mapping"])
    assert error_lines(err.value, root="spec.yaml") == [
        "spec.yaml: Input should be a valid dictionary or instance of Outer (got ['not', 'a', 'mapping'])"]
    assert error_lines(err.value, root="") == [
        "Input should be a valid dictionary or instance of Outer (got ['not', 'a', 'mapping'])"]


def test_a_long_input_is_not_repeated():
    [line] = lines({"name": "n", "inner": {"port": 1}, "items": "x" * 200})
    assert line == "items: Input should be a valid list"
