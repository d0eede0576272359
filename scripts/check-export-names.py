#!/usr/bin/env python3
"""Check every option name `dplan export` writes against the frameworks' sources.

Usage:
    scripts/check-export-names.py --megatron DIR --deepspeed DIR --torchtitan DIR [FILES...]

DIR is a checkout (or `git archive`) of NVIDIA/Megatron-LM, deepspeedai/DeepSpeed
and pytorch/torchtitan. FILES are exports to check (default: the golden exports
in tests/golden/export_*/expected_stdout). Nothing is imported, so no torch is
needed: names are read from the sources.

- Megatron-LM: the flags parse_args defines: literal '--x' strings in
  megatron/training/arguments.py, plus those ArgumentGroupFactory
  (megatron/training/argument_utils.py) derives from dataclass fields: foo_bar
  becomes --foo-bar, a bool defaulting to True becomes --no-foo-bar and
  --disable-foo-bar, an argparse_meta "arg_names" replaces the name, and each
  factory's exclude list is honoured.
- DeepSpeed: each key of ds_config.json appears as a quoted string or as a
  field name (DeepSpeedConfigModel) in deepspeed/, and the launcher's options
  as add_argument names in deepspeed/launcher/runner.py.
- torchtitan: each config.<section>.<field> is a field of ParallelismConfig or
  TrainingConfig (torchtitan/config/configs.py), and each --section.field
  override is in the frozen CLI list (tests/unit_tests/test_no_new_cli_options.py).

Exit status 1 and the unknown names listed when any name is not found.
"""
import argparse
import ast
import glob
import json
import os
import re
import sys


def megatron_flags(root):
    src = open(os.path.join(root, "megatron/training/arguments.py")).read()
    flags = set(re.findall(r"""['"](--[a-z0-9][a-z0-9-]*)['"]""", src))
    classes = {}
    for dirpath, _, files in os.walk(os.path.join(root, "megatron")):
        for f in files:
            if f.endswith(".py"):
                try:
                    tree = ast.parse(open(os.path.join(dirpath, f)).read())
                except (SyntaxError, UnicodeDecodeError):
                    continue
                for node in tree.body:
                    if isinstance(node, ast.ClassDef):
                        classes.setdefault(node.name, node)

    def fields(name):
        cls = classes.get(name)
        if cls is None:
            return []
        out = []
        for base in cls.bases:
            if isinstance(base, ast.Name):
                out += fields(base.id)
        out += [s for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
        return out

    tree = ast.parse(src)
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "ArgumentGroupFactory"):
            continue
        exclude = set()
        for kw in call.keywords:
            if kw.arg != "exclude":
                continue
            if isinstance(kw.value, ast.Name):
                for a in ast.walk(tree):
                    if isinstance(a, ast.Assign) and getattr(a.targets[0], "id", "") == kw.value.id:
                        exclude |= {e.value for e in a.value.elts}
            else:
                exclude |= {e.value for e in kw.value.elts}
        for f in fields(call.args[0].id):
            name = f.target.id
            if name in exclude or name.startswith("_"):
                continue
            text = ast.unparse(f)
            m = re.search(r"'arg_names':\s*\[([^\]]*)\]", text)
            if m:
                flags |= set(re.findall(r"'(--[^']+)'", m.group(1)))
                continue
            kebab = name.replace("_", "-")
            default = ast.unparse(f.value) if f.value is not None else ""
            if ast.unparse(f.annotation) == "bool" and default.split(",")[0].strip() in ("True", "field(default=True"):
                flags |= {"--no-" + kebab, "--disable-" + kebab}
            else:
                flags.add("--" + kebab)
    return flags


def deepspeed_names(root):
    text = []
    for path in glob.glob(os.path.join(root, "deepspeed/**/*.py"), recursive=True):
        text.append(open(path, errors="replace").read())
    blob = "\n".join(text)
    runner = open(os.path.join(root, "deepspeed/launcher/runner.py")).read()
    launcher = set(re.findall(r"""add_argument\(\s*(?:"-\w",\s*)?["'](--[a-z_]+)["']""", runner))
    init = open(os.path.join(root, "deepspeed/__init__.py")).read()
    launcher |= set(re.findall(r"""add_argument\(\s*["'](--[a-z_]+)["']""", init))
    return blob, launcher


def torchtitan_names(root):
    tree = ast.parse(open(os.path.join(root, "torchtitan/config/configs.py")).read())
    fields = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ("ParallelismConfig", "TrainingConfig"):
            section = "parallelism" if node.name == "ParallelismConfig" else "training"
            fields[section] = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)}
    frozen_src = open(os.path.join(root, "tests/unit_tests/test_no_new_cli_options.py")).read()
    frozen = set(re.findall(r'"([a-z_]+\.[a-z_.]+)"', frozen_src))
    return fields, frozen


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--megatron", required=True)
    ap.add_argument("--deepspeed", required=True)
    ap.add_argument("--torchtitan", required=True)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    files = args.files or sorted(glob.glob(os.path.join(here, "../tests/golden/export_*/expected_stdout")))
    meg = megatron_flags(args.megatron)
    ds_blob, ds_launcher = deepspeed_names(args.deepspeed)
    tt_fields, tt_frozen = torchtitan_names(args.torchtitan)
    bad, checked = [], 0
    for path in files:
        text = open(path).read()
        if "--format megatron" in text:
            for flag in re.findall(r"^    (--[a-z0-9-]+)", text, re.M):
                checked += 1
                if flag not in meg:
                    bad.append((path, flag))
        if "--format deepspeed" in text or text.lstrip().startswith("{"):
            body = text[text.index("{"): text.rindex("}") + 1]
            def walk(obj):
                for key, val in obj.items():
                    yield key
                    if isinstance(val, dict):
                        yield from walk(val)
            for key in walk(json.loads(body)):
                checked += 1
                if not re.search(r'["\']%s["\']|\b%s\s*:' % (key, key), ds_blob):
                    bad.append((path, key))
            for flag in re.findall(r"(?:^deepspeed | )(--[a-z_]+)", "\n".join(
                    l for l in text.splitlines() if l.startswith(("deepspeed ", "    train.py")))):
                checked += 1
                if flag not in ds_launcher:
                    bad.append((path, flag))
        if "--format torchtitan" in text:
            for section, field in re.findall(r"config\.(parallelism|training)\.([a-z_]+) =", text):
                checked += 1
                if field not in tt_fields.get(section, set()):
                    bad.append((path, "%s.%s" % (section, field)))
            for opt in re.findall(r"--((?:parallelism|training)\.(?:no_)?[a-z_]+)", text):
                checked += 1
                name = opt.replace(".no_", ".")
                if name not in tt_frozen:
                    bad.append((path, "--" + opt))
    for path, name in bad:
        print("%s: %s: not found in the framework's sources" % (os.path.relpath(path), name))
    print("%d names checked in %d files, %d unknown" % (checked, len(files), len(bad)))
    return 1 if bad or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
