"""One schema loader: a pydantic model compiles to the same grammar whether it reaches the compiler as the class
itself or as the text `protocol.json_schema_text` makes of it (objects closed: no undeclared keys)."""
import pydantic
import pytest

from sglite.protocol import json_schema_text
from sglite.runtime.constrained.errors import GrammarError

from .conftest import feed


class Inner(pydantic.BaseModel):
    x: int


class Person(pydantic.BaseModel):
    name: str
    inner: Inner


class Open(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    name: str


def test_pydantic_model_compiles_to_the_protocol_grammar(compiler):
    assert compiler.compile_json_schema(Person) is compiler.compile_json_schema(json_schema_text(Person))


def test_pydantic_objects_are_closed_on_the_compiler_path(tokenizer, compiler):
    g = compiler.compile_json_schema(Person, whitespace="compact")
    assert feed(tokenizer, g, '{"name":"a","inner":{"x":1}}')
    assert not feed(tokenizer, g, '{"name":"a","inner":{"x":1},"age":3}')
    assert not feed(tokenizer, g, '{"name":"a","inner":{"x":1,"y":2}}')


def test_extra_allow_stays_open(tokenizer, compiler):
    g = compiler.compile_json_schema(Open, whitespace="compact")
    assert feed(tokenizer, g, '{"name":"a","age":3}')


def test_bad_schema_is_a_grammar_error(compiler):
    with pytest.raises(GrammarError, match="not valid JSON"):
        compiler.compile_json_schema("{nope")
    with pytest.raises(GrammarError, match="pydantic model class"):
        compiler.compile_json_schema(3)
