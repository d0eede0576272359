#!/usr/bin/env python3
"""Every option a command's parser takes is in its --help.

The options are read from the source, where getopt sees them: each command's
`opts[]` table in cli/cmd_<command>.c, with the shared tables of cli/cli.h
(CLI_CLUSTER_OPTIONS, CLI_KNOB_OPTIONS, CLI_PLAN_OPTION) expanded. The help must
name each as `--name`; `--[no-]name` names both `--name` and `--no-name`.

    help_options.py DPLAN SOURCE_DIR
"""
import re
import subprocess
import sys

dplan, src = sys.argv[1], sys.argv[2]
import glob

header = "".join(open(f).read() for f in sorted(glob.glob(f"{src}/cli/*.h")))


def names(text):
    return re.findall(r'\{\s*"([a-z0-9-]+)"\s*,\s*(?:no|required|optional)_argument', text)


def macro(name):
    m = re.search(r"#define " + name + r"\b(.*?)(?<!\\)\n", header, re.S)
    if not m:
        sys.exit(f"cli/*.h: no macro {name}")
    return names(m.group(1))


shared = {k: macro(k) for k in re.findall(r"#define (CLI_[A-Z_]+_OPTIONS?)\b", header)}
assert len(shared["CLI_KNOB_OPTIONS"]) > 40, shared["CLI_KNOB_OPTIONS"]  # the table was read

commands = ["check", "estimate", "memory", "run", "simulate", "suggest", "whatif"]
missing = 0
for cmd in commands:
    code = open(f"{src}/cli/cmd_{cmd}.c").read()
    m = re.search(r"struct option opts\[\]\s*=\s*\{(.*?)\{0, 0, 0, 0\}", code, re.S)
    if not m:
        sys.exit(f"cli/cmd_{cmd}.c: no opts[] table")
    table = m.group(1)
    opts = names(table)
    for k, v in shared.items():
        if re.search(r"\b" + k + r"\b", table):
            opts += v
    opts = sorted(set(opts) - {"help"})
    helptext = subprocess.run([dplan, cmd, "--help"], capture_output=True, text=True).stdout
    if not helptext:
        sys.exit(f"dplan {cmd} --help printed nothing")

    def named(o):
        if re.search(r"--" + re.escape(o) + r"(?![a-z0-9-])", helptext):
            return True
        base = o[3:] if o.startswith("no-") else o
        return re.search(r"--\[no-\]" + re.escape(base) + r"(?![a-z0-9-])", helptext) is not None

    absent = [o for o in opts if not named(o)]
    print(f"dplan {cmd}: {len(opts)} options, {len(opts) - len(absent)} in --help"
          + (": missing " + " ".join("--" + o for o in absent) if absent else ""))
    missing += len(absent)
sys.exit(1 if missing else 0)
