"""YAML 1.2 (core schema) for recipes and `key=value` overrides.

PyYAML implements YAML 1.1, whose implicit types surprise: `0123` is octal 83, `1:30` is the
sexagesimal 90, `no`/`on`/`off` are booleans and `1e-5` is a string. YAML 1.2's core schema keeps
only: `null`/`~`/empty, `true`/`false` (any case spelling YAML lists), decimal, `0o` octal and `0x`
hex integers (`0123` is 123), and floats (`1e-5`, `.5`, `.inf`, `.nan`). Anything else is a string.
"""

from __future__ import annotations

import re

import yaml

_CORE = [
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", list("~nN") + [""]),
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    ("tag:yaml.org,2002:float",
     r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
     list("-+.0123456789")),
]


class Yaml12Loader(yaml.SafeLoader):
    """`yaml.SafeLoader` with YAML 1.2 core-schema implicit types instead of YAML 1.1's."""

    yaml_implicit_resolvers: dict = {}

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text)  # decimal, leading zeros included: '0123' -> 123 (1.1 would say 83)

    def construct_yaml_float(self, node):
        text = self.construct_scalar(node).lower()
        if text.endswith(("inf", "nan")):  # '.inf', '-.inf', '.nan'
            return float(text.replace(".", ""))
        return float(text)


for _tag, _pattern, _first in _CORE:
    Yaml12Loader.add_implicit_resolver(_tag, re.compile(_pattern), _first)
Yaml12Loader.add_constructor("tag:yaml.org,2002:int", Yaml12Loader.construct_yaml_int)
Yaml12Loader.add_constructor("tag:yaml.org,2002:float", Yaml12Loader.construct_yaml_float)


def load(text: str):
    """Parse YAML text with the 1.2 core schema."""
    return yaml.load(text, Loader=Yaml12Loader)  # noqa: S506 - a SafeLoader subclass


def scalar(text: str):
    """One plain scalar resolved like YAML 1.2 core, without YAML's other syntax (`#` stays text)."""
    for tag, pattern, _first in _CORE:
        if re.match(pattern, text):
            node = yaml.ScalarNode(tag, text)
            return Yaml12Loader("").construct_object(node)
    return text
