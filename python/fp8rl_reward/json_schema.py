"""A tool's JSON schema from its signature and Google-style docstring, by transformers'
conventions (transformers.utils.get_json_schema), so that a chat template sees the same `tools`
as under transformers / TRL:

    {"type": "function",
     "function": {"name": ..., "description": <the docstring's text before Args:>,
                  "parameters": {"type": "object",
                                 "properties": {arg: {<type>, "description": ...}, ...},
                                 "required": [<args without a default>]},
                  "return": {<type>, "description": <the Returns: text>}}}   (when annotated)

Types: int -> integer, float -> number, str -> string, bool -> boolean, Any -> {}, other classes
-> object; list[T] -> array of T, tuple[A, B] -> array with prefixItems, dict[K, V] -> object with
additionalProperties V; Union of basic types -> a sorted list of type names, of others -> anyOf;
Optional / `| None` adds "nullable": true; Literal[...] -> enum of its values. An argument's
description ending in "(choices: [...])" becomes an enum. A missing docstring, argument
description or type hint is an error naming it.
"""

import inspect
import json
import re
import types
import typing

_SECTION = r"(?:Args:|Arguments:|Returns:|Raises:)"


class SchemaError(ValueError):
    """A function that cannot be described: no docstring, an undocumented or unannotated
    argument, or a type hint with no JSON form."""


def _basic(hint):
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is typing.Any:
        return {}
    if hint is type(None):
        return {"type": "null"}
    if isinstance(hint, type):
        return {"type": "object"}
    raise SchemaError(f"the type hint {hint!r} has no JSON schema form")


def _literal(values):
    kinds = {type(v) for v in values}
    schema = {"enum": list(values)}
    if len(kinds) == 1:
        only = kinds.pop()
        if only in (int, float, str, bool):
            schema = {**_basic(only), **schema}
    return schema


def type_schema(hint):
    """The JSON schema of one type hint."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is None:
        return _basic(hint)
    if origin is typing.Union or origin is getattr(types, "UnionType", None):
        inner = [type_schema(a) for a in args if a is not type(None)]
        if len(inner) == 1:
            schema = dict(inner[0])
        elif all(isinstance(s.get("type"), str) and len(s) == 1 for s in inner):
            schema = {"type": sorted(s["type"] for s in inner)}
        else:
            schema = {"anyOf": inner}
        if type(None) in args:
            schema["nullable"] = True
        return schema
    if origin is typing.Literal:
        return _literal(args)
    if origin is list:
        return {"type": "array", "items": type_schema(args[0])} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or Ellipsis in args:
            raise SchemaError(f"the type hint {hint!r}: a tuple needs two or more fixed element "
                              "types (use list[...] for a variable length)")
        return {"type": "array", "prefixItems": [type_schema(a) for a in args]}
    if origin is dict:
        schema = {"type": "object"}
        if len(args) == 2:
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    raise SchemaError(f"the type hint {hint!r} has no JSON schema form")


def parse_docstring(doc):
    """(description, {argument: text}, returns text or None) of a Google-style docstring."""
    head = re.search(r"^(.*?)\s*(?:" + _SECTION + r"|\Z)", doc, re.DOTALL)
    description = head.group(1).strip() if head else ""
    arguments = {}
    block = re.search(r"\n\s*(?:Args|Arguments):\n(.*?)(?=\n\s*" + _SECTION + r"|\Z)", doc,
                      re.DOTALL)
    if block:
        lines = [line for line in block.group(1).split("\n") if line.strip()]
        text = "\n".join(lines)
        for m in re.finditer(r"(?:^|\n)\s*(\w+)(?:\s*\([^)]*\))?:\s*(.*?)\s*(?=\n\s*\w+(?:\s*\([^)]*\))?:|\Z)",
                             text, re.DOTALL):
            arguments[m.group(1)] = re.sub(r"\s*\n+\s*", " ", m.group(2).strip())
    returns = re.search(r"\n\s*Returns:\n\s*(.*?)\s*(?=\n\s*Raises:|\Z)", doc, re.DOTALL)
    return description, arguments, returns.group(1).strip() if returns else None


def get_json_schema(function):
    """The tool schema of `function` (see the module docstring)."""
    name = getattr(function, "__name__", repr(function))
    doc = inspect.getdoc(function)
    if not doc:
        raise SchemaError(f"tool {name} has no docstring: its description and each argument's "
                          "come from a Google-style docstring (Args:)")
    description, documented, returns = parse_docstring(doc.strip())
    hints = typing.get_type_hints(function)
    properties, required = {}, []
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name not in hints:
            raise SchemaError(f"tool {name}: argument '{param.name}' has no type hint")
        if param.name not in documented:
            raise SchemaError(f"tool {name}: argument '{param.name}' has no description in the "
                              "docstring's Args: section")
        schema = dict(type_schema(hints[param.name]))
        text = documented[param.name]
        choices = re.search(r"\(choices:\s*(.*?)\)\s*$", text, re.IGNORECASE)
        if choices:
            schema["enum"] = [c.strip() if isinstance(c, str) else c
                              for c in json.loads(choices.group(1))]
            text = text[:choices.start()].strip()
        schema["description"] = text
        properties[param.name] = schema
        if param.default is param.empty:
            required.append(param.name)
    parameters = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    out = {"name": name, "description": description, "parameters": parameters}
    if "return" in hints:
        ret = dict(type_schema(hints["return"]))
        if returns is not None:
            ret["description"] = returns
        out["return"] = ret
    return {"type": "function", "function": out}
