#!/usr/bin/env python3
"""
Write the seed corpora of the fuzz targets, one directory per loader, from
files already in the tree (shipped profiles, topology fixtures):

    seeds/model/ gpu/ link/ network/ system/ cluster/ layout/   fuzz_loaders
    seeds/topo_xml/                                             fuzz_topo_xml

fuzz_loaders picks its loader from the first byte of an input (byte % 7:
0 model, 1 gpu, 2 link, 3 network, 4 system, 5 cluster, 6 layout), so each
JSON seed is that byte followed by the file. fuzz_topo_xml takes the XML as
it is; only fixtures of at most MAX_XML bytes are used, the -max_len that
scripts/test.sh gives that target. Files already in a seed directory that
this script does not write (regressions found by fuzzing, hand-made seeds)
are kept. Run from the repository root: python3 tests/fuzz/make_seeds.py
"""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")
MAX_XML = 16384

SELECTOR = {"model": 0, "gpu": 1, "link": 2, "network": 3, "system": 4, "cluster": 5,
            "layout": 6}


def put(loader, name, data):
    d = os.path.join(SEEDS, loader)
    os.makedirs(d, exist_ok=True)
    if loader in SELECTOR:
        data = bytes([SELECTOR[loader]]) + data
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def profiles(kind, loader, names=None):
    d = os.path.join(ROOT, "profiles", kind)
    for f in sorted(os.listdir(d)):
        if f.endswith(".json") and (names is None or f[:-5] in names):
            with open(os.path.join(d, f), "rb") as h:
                put(loader, f[:-5], h.read())


def main():
    # Models in dplan's own format: the smallest, a GQA one, an MoE one, one with biases.
    profiles("models", "model", {"tiny-gpt", "tiny-llama", "llama3-8b", "mixtral-8x7b",
                                 "qwen2-7b", "gpt2-124m"})
    profiles("gpu", "gpu")
    profiles("interconnect", "link")
    profiles("network", "network")
    profiles("system", "system")
    # Cluster files as `dplan topo -o` writes them (inline profiles, group_links),
    # without the descriptive "topology" object the loader does not read.
    cdir = os.path.join(ROOT, "tests", "topology", "clusters")
    for f in sorted(os.listdir(cdir)):
        with open(os.path.join(cdir, f)) as h:
            c = json.load(h)
        c.pop("topology", None)
        put("cluster", f[:-5], json.dumps(c, indent=1).encode())
    put("layout", "every-key", json.dumps({
        "tp": 4, "pp": 4, "dp": 2, "cp": 2, "ep": 2, "vpp": 2, "mbs": 1, "gbs": 512,
        "seq_len": 8192, "zero": 1, "recompute": "selective", "sp": True, "flash_attn": True,
        "precision": "bf16", "grad_fp32": True, "optimizer": "adam", "dp_overlap": True,
        "first_stage_layers": 7, "last_stage_layers": 9}).encode())
    # The explicit splits: a list per model chunk, and a Megatron layout string.
    put("layout", "stage-layers", json.dumps({
        "tp": 1, "pp": 4, "dp": 1, "vpp": 2, "mbs": 1, "gbs": 8, "seq_len": 4096,
        "stage_layers": [0, 2, 2, 2, 2, 2, 2, 1]}).encode())
    put("layout", "pipeline-layout", json.dumps({
        "tp": 1, "pp": 4, "dp": 1, "mbs": 1, "gbs": 8, "seq_len": 4096,
        "pipeline_layout": "Et|(tt|)*6,tL"}).encode())
    # torchtitan's chunked loss and a pipeline schedule per local batch (session 18).
    put("layout", "torchtitan-chunks", json.dumps({
        "tp": 1, "pp": 4, "dp": 8, "mbs": 1, "gbs": 256, "seq_len": 8192, "zero": 3,
        "framework": "torchtitan", "recompute": "op", "loss": "compiled",
        "loss_chunks": 8, "local_batch": 8}).encode())
    xdir = os.path.join(ROOT, "tests", "topology", "xml")
    for f in sorted(os.listdir(xdir)):
        p = os.path.join(xdir, f)
        if f.endswith(".xml") and os.path.getsize(p) <= MAX_XML:
            with open(p, "rb") as h:
                put("topo_xml", f, h.read())


if __name__ == "__main__":
    main()
