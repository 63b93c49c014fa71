#!/usr/bin/env python3
"""Writes expected/<family>.<case>.txt: each template of this folder rendered on each conversation of
conversations.json by Python's jinja2, configured as transformers' apply_chat_template configures it
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now and
its tojson). A conversation the template rejects writes <family>.<case>.error.txt with the message instead.
Each small template of features.json (one Jinja feature each) writes expected/features.<name>.txt, rendered
on the multi_turn conversation.

Run from anywhere: python3 tests/data/chat_templates/make_expected.py (needs jinja2 >= 3.1)."""

import json
import pathlib
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parent


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


class Generation(Extension):
    """transformers' {% generation %} tag (it marks assistant text for masks); rendering keeps its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    env = environment()
    conversations = json.loads((HERE / "conversations.json").read_text(encoding="utf-8"))
    special_tokens = json.loads((HERE / "special_tokens.json").read_text(encoding="utf-8"))
    out = HERE / "expected"
    out.mkdir(exist_ok=True)
    for old in out.glob("*.txt"):
        old.unlink()
    for family, tokens in sorted(special_tokens.items()):
        template = env.from_string((HERE / f"{family}.jinja").read_text(encoding="utf-8"))
        # transformers passes the tokens it has; an unset one is not defined in the template.
        kwargs = {name: value for name, value in tokens.items() if value}
        for case in conversations:
            variables = dict(messages=case["messages"], tools=None, documents=None,
                             add_generation_prompt=case["add_generation_prompt"], **kwargs)
            variables.update(case.get("extra", {}))
            try:
                text, suffix = template.render(**variables), ".txt"
            except jinja2.exceptions.TemplateError as error:
                text, suffix = str(error), ".error.txt"
            (out / f"{family}.{case['name']}{suffix}").write_bytes(text.encode("utf-8"))
    messages = next(c["messages"] for c in conversations if c["name"] == "multi_turn")
    for feature in json.loads((HERE / "features.json").read_text(encoding="utf-8")):
        text = env.from_string(feature["template"]).render(messages=messages, tools=None, documents=None,
                                                           add_generation_prompt=True)
        (out / f"features.{feature['name']}.txt").write_bytes(text.encode("utf-8"))


if __name__ == "__main__":
    main()
