#!/usr/bin/env python3
"""
Write the multi-GPU hwloc XML fixtures in tests/topology/xml/.

Each file is what `lstopo --of xml` would export on a node built from
published facts (see tests/topology/README.md for the facts and what is
invented, such as bus numbers). The CPU part comes from an hwloc synthetic
topology (`lstopo --input "<description>" --of xml`); the PCI tree, GPU and
NIC OS devices and the NVLinkBandwidth distances are added here; the result
is round-tripped through `lstopo --input FILE --filter io:all --of xml` so that
it is exactly hwloc's own export format.

Run from the repository root with hwloc 2.x's lstopo on PATH:
    python3 tests/topology/gen_fixtures.py
The other fixtures are plain exports: this-machine.xml (`lstopo --of xml` on
the development VM) and synthetic-2pack.xml
(`lstopo --input "pack:2 numa:1 core:4 pu:1" --of xml`).
"""
import os
import subprocess
import tempfile
import xml.etree.ElementTree as ET

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xml")

GEN4_X16 = "31.507692"  # hwloc's linkspeed for 16 GT/s x16: 16 * 16 * 128/130 / 8 GB/s
GEN5_X16 = "63.015385"  # 32 GT/s x16


class Node:
    def __init__(self, synthetic, infos, cpu_vendor, cpu_model, family_model, numa_bytes):
        xml = subprocess.check_output(["lstopo", "--input", synthetic, "--of", "xml", "-"])
        self.root = ET.fromstring(xml)
        self.machine = self.root.find("object")
        self.gp = 1 + max(int(o.get("gp_index")) for o in self.root.iter("object"))
        # Machine infos as a Linux discovery writes them.
        for i in list(self.machine.findall("info")):
            self.machine.remove(i)
        for pos, (k, v) in enumerate(infos):
            e = ET.Element("info", {"name": k, "value": v})
            self.machine.insert(pos, e)
        for pk in self.objs("Package"):
            for pos, (k, v) in enumerate([("CPUVendor", cpu_vendor),
                                          ("CPUFamilyNumber", str(family_model[0])),
                                          ("CPUModelNumber", str(family_model[1])),
                                          ("CPUModel", cpu_model)]):
                pk.insert(pos, ET.Element("info", {"name": k, "value": v}))
        for n in self.objs("NUMANode"):
            n.set("local_memory", str(numa_bytes))
            for pt in n.findall("page_type"):
                pt.set("count", str(numa_bytes // int(pt.get("size"))) if pt.get("size") == "4096" else "0")
        self.busy = set()

    def objs(self, typ):
        return [o for o in self.root.iter("object") if o.get("type") == typ]

    def numa_parent(self, numa_os):
        """The normal object holding NUMA node numa_os (Package or Group)."""
        for o in self.root.iter("object"):
            for c in o.findall("object"):
                if c.get("type") == "NUMANode" and c.get("os_index") == str(numa_os):
                    return o
        raise KeyError(numa_os)

    def add(self, parent, attrs, infos=()):
        e = ET.SubElement(parent, "object")
        for k, v in attrs:
            e.set(k, v)
        e.set("gp_index", str(self.gp))
        self.gp += 1
        for k, v in infos:
            ET.SubElement(e, "info", {"name": k, "value": v})
        return e

    def hostbridge(self, parent, lo, hi):
        return self.add(parent, [("type", "Bridge"), ("bridge_type", "0-1"), ("depth", "0"),
                                 ("bridge_pci", "0000:[%02x-%02x]" % (lo, hi))])

    def bridge(self, parent, busid, lo, hi, depth, vendor_dev, speed):
        return self.add(parent, [("type", "Bridge"), ("bridge_type", "1-1"), ("depth", str(depth)),
                                 ("bridge_pci", "0000:[%02x-%02x]" % (lo, hi)),
                                 ("pci_busid", busid),
                                 ("pci_type", "0604 [%s] [0000:0000] 00" % vendor_dev),
                                 ("pci_link_speed", speed)])

    def pcidev(self, parent, busid, cls, vendor_dev, sub, rev, speed, infos=()):
        return self.add(parent, [("type", "PCIDev"), ("pci_busid", busid),
                                 ("pci_type", "%s [%s] [%s] %s" % (cls, vendor_dev, sub, rev)),
                                 ("pci_link_speed", speed)], infos)

    def osdev(self, parent, name, typ, subtype=None, infos=()):
        attrs = [("type", "OSDev"), ("name", name)]
        if subtype:
            attrs.append(("subtype", subtype))
        attrs.append(("osdev_type", str(typ)))
        return self.add(parent, attrs, infos)

    def distances(self, name, objs, values, kind):
        d = ET.SubElement(self.root, "distances2hetero",
                          {"nbobjs": str(len(objs)), "kind": str(kind), "name": name})
        ix = ET.SubElement(d, "indexes")
        ix.text = "".join("%s:%s " % (t, o.get("gp_index")) for t, o in objs)
        ix.set("length", str(len(ix.text)))
        v = ET.SubElement(d, "u64values")
        v.text = "".join("%d " % x for x in values)
        v.set("length", str(len(v.text)))

    def write(self, fname):
        # RDMA devices are numbered in PCI bus order, as the kernel probes them.
        ofed = []
        for o in self.root.iter("object"):
            if o.get("type") == "PCIDev":
                for c in o.findall("object"):
                    if c.get("type") == "OSDev" and c.get("osdev_type") == "3":
                        ofed.append((o.get("pci_busid"), c))
        count = {}
        for _, c in sorted(ofed, key=lambda x: x[0]):
            prefix = c.get("name").rstrip("0123456789")  # mlx5_, mlx4_
            c.set("name", "%s%d" % (prefix, count.get(prefix, 0)))
            count[prefix] = count.get(prefix, 0) + 1
        # <support> and <cpukind> elements must follow the objects.
        for tag in ("support", "cpukind"):
            for e in self.root.findall(tag):
                self.root.remove(e)
        raw = ET.tostring(self.root, encoding="unicode")
        with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n'
                    '<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n' + raw)
            tmp = f.name
        out = os.path.join(OUT, fname)
        subprocess.check_call(["lstopo", "--input", tmp, "--filter", "io:all", "--of", "xml",
                               "--force", out], stderr=subprocess.DEVNULL)
        os.unlink(tmp)
        print("wrote", out)


def linux_infos(host, hwloc_version):
    return [("Backend", "Linux"), ("LinuxCgroup", "/"), ("OSName", "Linux"),
            ("OSRelease", "5.15.0-1042-nvidia"), ("OSVersion", "#42-Ubuntu SMP"),
            ("HostName", host), ("Architecture", "x86_64"),
            ("hwlocVersion", hwloc_version), ("ProcessName", "lstopo")]


def nvidia_gpu(node, parent, busid, devid, pci_name, speed, gpu_idx, model, mem_kib, sms, nvml,
               cuda=True):
    """
    A GPU; with nvml=True it has the nvml OS device of an hwloc built with NVML,
    and with cuda=True also the cuda one. pci_name None: no PCIDevice info (the
    exporting machine's pci.ids did not know the board).
    """
    infos = [("PCIVendor", "NVIDIA Corporation")] + ([("PCIDevice", pci_name)] if pci_name else [])
    g = node.pcidev(parent, busid, "0302", "10de:%s" % devid, "10de:%s" % devid, "a1", speed, infos)
    osd = None
    if nvml:
        osd = node.osdev(g, "nvml%d" % gpu_idx, 1, "NVML",
                         [("Backend", "NVML"), ("GPUVendor", "NVIDIA Corporation"),
                          ("GPUModel", model)])
    if nvml and cuda:
        node.osdev(g, "cuda%d" % gpu_idx, 5, "CUDA",
                   [("Backend", "CUDA"), ("GPUVendor", "NVIDIA Corporation"), ("GPUModel", model),
                    ("CUDAGlobalMemorySize", str(mem_kib)), ("CUDAL2CacheSize", "51200"),
                    ("CUDAMultiProcessors", str(sms)), ("CUDACoresPerMP", "128"),
                    ("CUDASharedMemorySizePerMP", "48")])
    return g, osd


def mlx_nic(node, parent, busid, devid, pci_name, ib, rdma, netdev, speed, func_of=None):
    cls = "0207" if ib else "0200"
    n = node.pcidev(parent, busid, cls, "15b3:%s" % devid, "15b3:0016", "00", speed,
                    [("PCIVendor", "Mellanox Technologies"), ("PCIDevice", pci_name)])
    node.osdev(n, netdev, 2, None, [("Address", "00:00:00:00:00:00")] if not ib else [])
    node.osdev(n, rdma, 3, None, [("NodeGUID", "0000:0000:0000:0000"),
                                  ("Port1State", "4"), ("Port1LID", "0x0"),
                                  ("Port1LMC", "0")])
    return n


def nvswitch_distances(node, gpus, switches, mbps):
    """
    The NVLinkBandwidth matrix of GPUs wired only to NVSwitch chips, as hwloc's
    NVML backend writes it: GPU OS devices then switch PCI devices; mbps[k] MB/s
    each way between every GPU and switch k; 0 between two GPUs or two
    switches; 1000000 on the diagonal.
    """
    objs = [("OSDev", g) for g in gpus] + [("PCIDev", s) for s in switches]
    ng, n = len(gpus), len(objs)
    vals = []
    for i in range(n):
        for j in range(n):
            if i == j:
                vals.append(1000000)
            elif i < ng <= j:
                vals.append(mbps[j - ng])
            elif j < ng <= i:
                vals.append(mbps[i - ng])
            else:
                vals.append(0)
    node.distances("NVLinkBandwidth", objs, vals, 25)


def dgx_h100(nvml, fname, hwloc_version):
    """
    DGX H100: 2x Xeon Platinum 8480C (56 cores, 2 threads), one NUMA node per
    socket, 8 H100 SXM5 80GB, 4 NVSwitch chips, 8 ConnectX-7 NDR compute
    NICs and 2 dual-port ConnectX-7 storage NICs. Each of 4 PCIe Gen5 switches
    holds two GPUs and two compute NICs; switches 0-1 hang off socket 0,
    switches 2-3 off socket 1, each below its own host bridge.
    """
    node = Node("pack:2 numa:1 core:56 pu:2", linux_infos("dgx-h100", hwloc_version),
                "GenuineIntel", "Intel(R) Xeon(R) Platinum 8480C", (6, 143), 1 << 40)
    gpus, switches = [], []
    nic = 0
    for sw, base in enumerate([0x10, 0x30, 0x90, 0xb0]):
        pkg = node.numa_parent(0 if sw < 2 else 1)
        hb = node.hostbridge(pkg, base, base + 0xf)
        rp = node.bridge(hb, "0000:%02x:01.0" % base, base + 1, base + 0xf, 1, "8086:352a", GEN5_X16)
        usp = node.bridge(rp, "0000:%02x:00.0" % (base + 1), base + 2, base + 0xf, 2, "1000:c030", GEN5_X16)
        for port in range(4):
            bus = base + 3 + port
            dsp = node.bridge(usp, "0000:%02x:%02x.0" % (base + 2, port), bus, bus, 3, "1000:c030", GEN5_X16)
            if port < 2:
                idx = len(gpus)
                g, osd = nvidia_gpu(node, dsp, "0000:%02x:00.0" % bus, "2330", "GH100 [H100 SXM5 80GB]",
                                    GEN5_X16, idx, "NVIDIA H100 80GB HBM3", 81559 * 1024, 132, nvml)
                gpus.append(osd)
            else:
                mlx_nic(node, dsp, "0000:%02x:00.0" % bus, "1021", "MT2910 Family [ConnectX-7]", True,
                        "mlx5_%d" % nic, "ibp%ds0" % bus, GEN5_X16)
                nic += 1
    # The NVSwitch chips' PCIe management endpoints, behind a switch of socket 0.
    hb = node.hostbridge(node.numa_parent(0), 0x50, 0x5f)
    rp = node.bridge(hb, "0000:50:01.0", 0x51, 0x5f, 1, "8086:352a", GEN5_X16)
    usp = node.bridge(rp, "0000:51:00.0", 0x52, 0x5f, 2, "1000:c030", GEN5_X16)
    for i in range(4):
        dsp = node.bridge(usp, "0000:52:%02x.0" % i, 0x53 + i, 0x53 + i, 3, "1000:c030", GEN5_X16)
        switches.append(node.pcidev(dsp, "0000:%02x:00.0" % (0x53 + i), "0680", "10de:22a3",
                                    "10de:1796", "a1", GEN4_X16,
                                    [("PCIVendor", "NVIDIA Corporation"),
                                     ("PCIDevice", "GH100 [H100 NVSwitch]")]))
    # Storage: one dual-port ConnectX-7 (Ethernet) per socket on its own root port.
    for s, base in enumerate([0x60, 0xe0]):
        hb = node.hostbridge(node.numa_parent(s), base, base + 1)
        rp = node.bridge(hb, "0000:%02x:01.0" % base, base + 1, base + 1, 1, "8086:352a", GEN5_X16)
        for f in range(2):
            mlx_nic(node, rp, "0000:%02x:00.%d" % (base + 1, f), "1021", "MT2910 Family [ConnectX-7]",
                    False, "mlx5_%d" % nic, "enp%ds0f%dnp%d" % (base + 1, f, f), GEN5_X16)
            nic += 1
    if nvml:
        # hwloc >= 2.12 NVML backend: unidirectional MB/s, 25000 per NVLink 4 link; each GPU's
        # 18 links go 5, 4, 4, 5 to the four NVSwitch chips; 0 = no link; diagonal 1000000.
        nvswitch_distances(node, gpus, switches, [k * 25000 for k in [5, 4, 4, 5]])
    node.write(fname)


def dgx_a100():
    """
    DGX A100 640GB: 2x AMD EPYC 7742 (64 cores, 2 threads) in NPS4 mode, so 8
    NUMA nodes of 16 cores; 8 A100 SXM4 80GB, 6 NVSwitch chips, 8 ConnectX-6
    HDR compute NICs and 2 dual-port ConnectX-6 storage NICs. Four PCIe
    complexes (NUMA nodes 3, 1, 7, 5) each hold two GPUs and two NICs behind a
    two-level switch tree, so GPU-NIC and GPU-GPU paths are PXB, as in the
    published `nvidia-smi topo -m` of this machine. Exported by an hwloc 2.9.0
    built with NVML, whose table counts an NVLink 3 link as 50000 MB/s.
    """
    node = Node("pack:2 group:4 numa:1 core:16 pu:2", linux_infos("dgx-a100", "2.9.0"),
                "AuthenticAMD", "AMD EPYC 7742 64-Core Processor", (23, 49), 256 << 30)
    gpus, switches = [], []
    nic = 0
    for cx, (numa, base) in enumerate([(3, 0x07), (1, 0x47), (7, 0x87), (5, 0xb7)]):
        hb = node.hostbridge(node.numa_parent(numa), base - 7, base + 0x18)
        rp = node.bridge(hb, "0000:%02x:01.1" % (base - 7), base - 6, base + 0x18, 1, "1022:1483", GEN4_X16)
        top = node.bridge(rp, "0000:%02x:00.0" % (base - 6), base - 5, base + 0x18, 2, "1000:c010", GEN4_X16)
        for half in range(2):  # 0: GPUs, 1: NICs, each behind its own second-level switch
            b = base - 4 + half * 0x10
            dsp = node.bridge(top, "0000:%02x:%02x.0" % (base - 5, half * 8), b, b + 0xb, 3, "1000:c010", GEN4_X16)
            usp = node.bridge(dsp, "0000:%02x:00.0" % b, b + 1, b + 0xb, 4, "1000:c010", GEN4_X16)
            for k in range(2):
                bus = b + 2 + k * 4
                port = node.bridge(usp, "0000:%02x:%02x.0" % (b + 1, k * 4), bus, bus, 5, "1000:c010", GEN4_X16)
                if half == 0:
                    g, osd = nvidia_gpu(node, port, "0000:%02x:00.0" % bus, "20b2", "GA100 [A100 SXM4 80GB]",
                                        GEN4_X16, len(gpus), "NVIDIA A100-SXM4-80GB", 81920 * 1024, 108, True)
                    gpus.append(osd)
                else:
                    mlx_nic(node, port, "0000:%02x:00.0" % bus, "101b", "MT28908 Family [ConnectX-6]", True,
                            "mlx5_%d" % nic, "ibp%ds0" % bus, GEN4_X16)
                    nic += 1
    hb = node.hostbridge(node.numa_parent(0), 0xc0, 0xcf)
    rp = node.bridge(hb, "0000:c0:01.1", 0xc1, 0xcf, 1, "1022:1483", GEN4_X16)
    usp = node.bridge(rp, "0000:c1:00.0", 0xc2, 0xcf, 2, "1000:c010", GEN4_X16)
    for i in range(6):
        dsp = node.bridge(usp, "0000:c2:%02x.0" % i, 0xc3 + i, 0xc3 + i, 3, "1000:c010", GEN4_X16)
        switches.append(node.pcidev(dsp, "0000:%02x:00.0" % (0xc3 + i), "0680", "10de:1af1",
                                    "10de:1492", "a1", GEN4_X16,
                                    [("PCIVendor", "NVIDIA Corporation"),
                                     ("PCIDevice", "GA100 [A100 NVSwitch]")]))
    for numa, base in [(2, 0x60), (6, 0xe0)]:
        hb = node.hostbridge(node.numa_parent(numa), base, base + 1)
        rp = node.bridge(hb, "0000:%02x:01.1" % base, base + 1, base + 1, 1, "1022:1483", GEN4_X16)
        for f in range(2):
            mlx_nic(node, rp, "0000:%02x:00.%d" % (base + 1, f), "101b", "MT28908 Family [ConnectX-6]",
                    False, "mlx5_%d" % nic, "enp%ds0f%d" % (base + 1, f), GEN4_X16)
            nic += 1
    # 12 NVLink 3 links per GPU, 2 to each of the 6 NVSwitch chips; hwloc 2.9.0 writes
    # 50000 MB/s per link (its old table), so 100000 per GPU-switch pair.
    nvswitch_distances(node, gpus, switches, [2 * 50000] * len(switches))
    node.write("dgx-a100.xml")


def pcie_l40s():
    """
    8x L40S PCIe server (NVIDIA's 2-8-5 PCIe-optimised layout): 2x Xeon
    Platinum 8462Y+ (32 cores, 2 threads), one NUMA node per socket. Each
    socket has one host bridge with two root ports, each feeding a PCIe switch
    with two L40S and one 400GbE ConnectX-7 (RoCE); a fifth ConnectX-7
    (north-south) sits on its own root port of socket 0. No NVLink. Exported
    by Debian's hwloc 2.9.0 (no NVML/CUDA plugins: GPUs appear as PCI devices).
    """
    node = Node("pack:2 numa:1 core:32 pu:2", linux_infos("l40s-box", "2.9.0"),
                "GenuineIntel", "Intel(R) Xeon(R) Platinum 8462Y+", (6, 143), 512 << 30)
    gpu = nic = 0
    for s, base in enumerate([0x10, 0x90]):
        hb = node.hostbridge(node.numa_parent(s), base, base + 0x3f)
        for k in range(2):
            b = base + 1 + k * 0x10
            rp = node.bridge(hb, "0000:%02x:%02x.0" % (base, k + 1), b, b + 0xf, 1, "8086:352a", GEN5_X16)
            usp = node.bridge(rp, "0000:%02x:00.0" % b, b + 1, b + 0xf, 2, "1000:c030", GEN5_X16)
            for port in range(3):
                bus = b + 2 + port
                dsp = node.bridge(usp, "0000:%02x:%02x.0" % (b + 1, port), bus, bus, 3, "1000:c030", GEN5_X16)
                if port < 2:
                    node.pcidev(dsp, "0000:%02x:00.0" % bus, "0302", "10de:26b9", "10de:1851", "a1", GEN4_X16,
                                [("PCIVendor", "NVIDIA Corporation"), ("PCIDevice", "AD102GL [L40S]")])
                    gpu += 1
                else:
                    mlx_nic(node, dsp, "0000:%02x:00.0" % bus, "1021", "MT2910 Family [ConnectX-7]", False,
                            "mlx5_%d" % nic, "ens%dnp0" % (nic + 1), GEN5_X16)
                    nic += 1
        if s == 0:
            rp = node.bridge(hb, "0000:%02x:03.0" % base, base + 0x21, base + 0x21, 1, "8086:352a", GEN5_X16)
            mlx_nic(node, rp, "0000:%02x:00.0" % (base + 0x21), "1021", "MT2910 Family [ConnectX-7]", False,
                    "mlx5_4", "ens9np0", GEN5_X16)
    node.write("pcie-8x-l40s.xml")


def t4_box():
    """
    A GPU dplan has no profile for: one socket (Xeon Gold 6248, Cascade Lake,
    family 6 model 85), two Tesla T4 (10de:1eb8) on one root port's switch, one
    100 GbE NIC without RDMA. For the "unknown GPU" messages.
    """
    node = Node("pack:1 numa:1 core:20 pu:2", linux_infos("t4-box", "2.9.0"),
                "GenuineIntel", "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", (6, 85), 192 << 30)
    hb = node.hostbridge(node.numa_parent(0), 0x10, 0x1f)
    rp = node.bridge(hb, "0000:10:01.0", 0x11, 0x1f, 1, "8086:2030", "15.753846")
    usp = node.bridge(rp, "0000:11:00.0", 0x12, 0x1f, 2, "10b5:8747", "15.753846")
    for i in range(2):
        dsp = node.bridge(usp, "0000:12:%02x.0" % (8 * i), 0x13 + i, 0x13 + i, 3, "10b5:8747", "15.753846")
        node.pcidev(dsp, "0000:%02x:00.0" % (0x13 + i), "0302", "10de:1eb8", "10de:12a2", "a1", "15.753846",
                    [("PCIVendor", "NVIDIA Corporation"), ("PCIDevice", "TU104GL [Tesla T4]")])
    rp = node.bridge(hb, "0000:10:02.0", 0x1a, 0x1a, 1, "8086:2031", "15.753846")
    n = node.pcidev(rp, "0000:1a:00.0", "0200", "8086:1592", "8086:0002", "02", "15.753846",
                    [("PCIVendor", "Intel Corporation"), ("PCIDevice", "Ethernet Controller E810-C for QSFP")])
    node.osdev(n, "ens1f0", 2, None, [("Address", "00:00:00:00:00:00")])
    node.write("unknown-gpu.xml")


GEN2_X16 = "8.000000"     # 5 GT/s x16: 5 * 16 * 8/10 / 8 GB/s
GEN3_X16 = "15.753846"    # 8 GT/s x16: 8 * 16 * 128/130 / 8 GB/s


def dgx2():
    """
    DGX-2: 2x Xeon Platinum 8168 (24 cores, 2 threads; Skylake-SP, family 6
    model 85), one NUMA node per socket, 1.5 TB; 16 Tesla V100 SXM3 32GB on two
    baseboards of 8, each baseboard with 6 NVSwitch chips; every GPU has 6
    NVLink 2 links, one to each switch of its baseboard. Exported by an hwloc
    2.9.0 with its NVML backend (nvml OS devices, NVLinkBandwidth at 25000 MB/s
    per NVLink 2 link), with I/O only for the GPUs and the NVSwitch chips: no
    NICs. One switch's PCI config space reads as zeros (class and ids 0000),
    so only hwloc's NVSwitch subtype, set from NVML, says what it is.
    Each socket has two host bridges; each feeds a PCIe Gen3 switch with two
    second-level switches of two GPUs. The NVSwitch management endpoints of
    baseboard b sit behind a small switch on the second host bridge of socket b.
    """
    node = Node("pack:2 numa:1 core:24 pu:2", linux_infos("dgx-2", "2.9.0"),
                "GenuineIntel", "Intel(R) Xeon(R) Platinum 8168 CPU @ 2.70GHz", (6, 85), 768 << 30)
    gpus, switches = [], [[], []]
    for hbi, base in enumerate([0x10, 0x40, 0x90, 0xc0]):
        sock = hbi // 2
        hb = node.hostbridge(node.numa_parent(sock), base, base + 0x2f)
        rp = node.bridge(hb, "0000:%02x:00.0" % base, base + 1, base + 0x2f, 1, "8086:2030", GEN3_X16)
        top = node.bridge(rp, "0000:%02x:00.0" % (base + 1), base + 2, base + 0x2f, 2, "10b5:9797", GEN3_X16)
        for half in range(2):
            b = base + 3 + half * 8
            dsp = node.bridge(top, "0000:%02x:%02x.0" % (base + 2, half * 8), b, b + 7, 3, "10b5:9797", GEN3_X16)
            usp = node.bridge(dsp, "0000:%02x:00.0" % b, b + 1, b + 7, 4, "10b5:9781", GEN3_X16)
            for k in range(2):
                bus = b + 2 + k * 2
                port = node.bridge(usp, "0000:%02x:%02x.0" % (b + 1, k * 8), bus, bus, 5, "10b5:9781", GEN3_X16)
                g, osd = nvidia_gpu(node, port, "0000:%02x:00.0" % bus, "1db8",
                                    "GV100GL [Tesla V100 SXM3 32GB]", GEN3_X16, len(gpus),
                                    "Tesla V100-SXM3-32GB", 0, 80, True, cuda=False)
                gpus.append(osd)
        if hbi % 2 == 1:
            # Baseboard `sock`'s 6 NVSwitch endpoints, Gen1 x1 management links.
            b = base + 0x20
            dsp = node.bridge(top, "0000:%02x:10.0" % (base + 2), b, b + 7, 3, "10b5:9797", GEN3_X16)
            usp = node.bridge(dsp, "0000:%02x:00.0" % b, b + 1, b + 7, 4, "10b5:8725", "0.250000")
            for i in range(6):
                bus = b + 2 + i
                port = node.bridge(usp, "0000:%02x:%02x.0" % (b + 1, i + 1), bus, bus, 5, "10b5:8725", "0.250000")
                broken = sock == 0 and i == 4
                sw = node.add(port, [("type", "PCIDev"), ("subtype", "NVSwitch"),
                                     ("pci_busid", "0000:%02x:00.0" % bus),
                                     ("pci_type", "0000 [0000:0000] [0000:0000] 00" if broken
                                      else "0680 [10de:1ac2] [0000:0000] a1"),
                                     ("pci_link_speed", "0.250000")],
                              [] if broken else [("PCIVendor", "NVIDIA Corporation")])
                switches[sock].append(sw)
    # NVLinkBandwidth: GPU i (baseboard i // 8) to each of its baseboard's 6 switches,
    # one NVLink 2 link of 25000 MB/s each way; nothing across baseboards from a GPU.
    allsw = switches[0] + switches[1]
    objs = [("OSDev", g) for g in gpus] + [("PCIDev", s) for s in allsw]
    n, ng = len(objs), len(gpus)
    vals = []
    for i in range(n):
        for j in range(n):
            if i == j:
                vals.append(1000000)
            elif i < ng <= j or j < ng <= i:
                gi, si = (i, j - ng) if i < ng else (j, i - ng)
                vals.append(25000 if gi // 8 == si // 6 else 0)
            else:
                vals.append(0)
    node.distances("NVLinkBandwidth", objs, vals, 25)
    node.write("dgx-2.xml")


def pcie_24core():
    """
    A 24-PU PCIe node of the Tesla M2070 era (the shape of an HP ProLiant
    SL390s G7): 2x 6-core Xeon X5650 (Westmere-EP, family 6 model 44, 2
    threads), one NUMA node and one 5520 I/O hub per socket; PUs numbered as
    Linux does on such boxes (socket 0 has the even ones, a core's second
    thread is 12 higher), so a socket's CPU list is 35 characters long. Three
    Tesla M2070 (10de:06d2, PCIe Gen2 x16) on their own root ports, one on
    socket 0 and two on socket 1; an onboard ATI ES1000 (1002:515e, class 0300
    VGA, with its DRM device card0), the BMC's display chip, behind the ICH10's
    PCI bridge; a ConnectX
    QDR InfiniBand HCA (15b3:673c, class 0c06) and a dual-port 82576 GbE on
    socket 0. The GPUs carry no PCIDevice name (the exporting machine's pci.ids
    did not know them). Debian's hwloc 2.9.0, no NVML.
    """
    order = []
    for p in range(2):
        for c in range(6):
            order += [2 * c + p, 2 * c + p + 12]
    node = Node("pack:2 numa:1 core:6 pu:2(indexes=%s)" % ",".join(map(str, order)),
                linux_infos("sl390s", "2.9.0"), "GenuineIntel",
                "Intel(R) Xeon(R) CPU           X5650  @ 2.67GHz", (6, 44), 24 << 30)
    hb = node.hostbridge(node.numa_parent(0), 0x00, 0x0f)
    rp = node.bridge(hb, "0000:00:01.0", 0x01, 0x01, 1, "8086:3408", "0.500000")
    for f in range(2):
        n = node.pcidev(rp, "0000:01:00.%d" % f, "0200", "8086:10c9", "103c:323f", "01", "0.500000",
                        [("PCIVendor", "Intel Corporation"),
                         ("PCIDevice", "82576 Gigabit Network Connection")])
        node.osdev(n, "eth%d" % f, 2, None, [("Address", "00:00:00:00:00:00")])
    rp = node.bridge(hb, "0000:00:05.0", 0x02, 0x02, 1, "8086:340c", "4.000000")
    n = node.pcidev(rp, "0000:02:00.0", "0c06", "15b3:673c", "103c:1782", "b0", "4.000000",
                    [("PCIVendor", "Mellanox Technologies"),
                     ("PCIDevice", "MT25408A0-FCC-QI ConnectX, Dual Port 40Gb/s InfiniBand / 10GigE "
                                   "Adapter IC with PCIe 2.0 x8 5.0GT/s Interface")])
    node.osdev(n, "ib0", 2, None, [])
    node.osdev(n, "mlx4_0", 3, None, [("NodeGUID", "0000:0000:0000:0000"), ("Port1State", "4")])
    rp = node.bridge(hb, "0000:00:07.0", 0x03, 0x03, 1, "8086:340e", GEN2_X16)
    nvidia_gpu(node, rp, "0000:03:00.0", "06d2", None, GEN2_X16, 0, None, 0, 14, False)
    pb = node.bridge(hb, "0000:00:1e.0", 0x04, 0x04, 1, "8086:244e", "0.000000")
    es = node.pcidev(pb, "0000:04:03.0", "0300", "1002:515e", "103c:31fb", "02", "0.000000",
                     [("PCIVendor", "Advanced Micro Devices, Inc. [AMD/ATI]"), ("PCIDevice", "ES1000")])
    node.osdev(es, "card0", 1)  # its DRM device (radeon driver): a GPU-typed OS device
    node.pcidev(hb, "0000:00:1f.2", "0101", "8086:3a20", "103c:330d", "00", "0.000000",
                [("PCIVendor", "Intel Corporation"),
                 ("PCIDevice", "82801JI (ICH10 Family) 4 port SATA IDE Controller #1")])
    hb = node.hostbridge(node.numa_parent(1), 0x80, 0x8f)
    for k, (dev, rpid) in enumerate([(3, "340a"), (7, "340e")]):
        rp = node.bridge(hb, "0000:80:%02x.0" % dev, 0x81 + k, 0x81 + k, 1, "8086:%s" % rpid, GEN2_X16)
        nvidia_gpu(node, rp, "0000:%02x:00.0" % (0x81 + k), "06d2", None, GEN2_X16, 1 + k, None, 0,
                   14, False)
    node.write("pcie-24core-3gpu.xml")


def fuzz_seed_nvswitch():
    """
    A fuzz seed (tests/fuzz/seeds/topo_xml), small enough for the fuzzer's
    -max_len: one socket of 4 cores, two H100 SXM5 and a ConnectX-7 on one
    Gen5 switch, two NVSwitch endpoints, and the NVLinkBandwidth matrix of an
    hwloc 2.12 (9 links of 25000 MB/s from each GPU to each switch), so that
    the fuzzer starts from the NVLink and NIC paths. Not a real machine.
    """
    node = Node("pack:1 numa:1 core:4 pu:1", linux_infos("seed", "2.12.0"),
                "GenuineIntel", "Intel(R) Xeon(R) Platinum 8480C", (6, 143), 64 << 30)
    hb = node.hostbridge(node.numa_parent(0), 0x10, 0x1f)
    rp = node.bridge(hb, "0000:10:01.0", 0x11, 0x1f, 1, "8086:352a", GEN5_X16)
    usp = node.bridge(rp, "0000:11:00.0", 0x12, 0x1f, 2, "1000:c030", GEN5_X16)
    gpus, switches = [], []
    for port in range(5):
        bus = 0x13 + port
        dsp = node.bridge(usp, "0000:12:%02x.0" % port, bus, bus, 3, "1000:c030", GEN5_X16)
        if port < 2:
            g, osd = nvidia_gpu(node, dsp, "0000:%02x:00.0" % bus, "2330", "GH100 [H100 SXM5 80GB]",
                                GEN5_X16, port, "NVIDIA H100 80GB HBM3", 81559 * 1024, 132, True)
            gpus.append(osd)
        elif port == 2:
            mlx_nic(node, dsp, "0000:%02x:00.0" % bus, "1021", "MT2910 Family [ConnectX-7]", True,
                    "mlx5_0", "ibp%ds0" % bus, GEN5_X16)
        else:
            switches.append(node.pcidev(dsp, "0000:%02x:00.0" % bus, "0680", "10de:22a3", "10de:1796",
                                        "a1", GEN4_X16, [("PCIVendor", "NVIDIA Corporation")]))
    nvswitch_distances(node, gpus, switches, [9 * 25000, 9 * 25000])
    global OUT
    saved, OUT = OUT, os.path.join(os.path.dirname(os.path.dirname(OUT)), "fuzz", "seeds", "topo_xml")
    node.write("nvswitch-2gpu.xml")
    OUT = saved


def crash_l3():
    """
    A file hwloc 2.9.0's loader crashes on (issue 10, item 7): an hwloc
    synthetic export whose first L3Cache lacks its complete_cpuset attribute.
    hwloc dereferences the missing set while sorting the two L3 siblings, so
    the file is written as is, not round-tripped through lstopo.
    """
    xml = subprocess.check_output(["lstopo", "--input", "pack:1 numa:1 l3:2 core:2 pu:1",
                                   "--of", "xml", "-"]).decode()
    at = xml.index('type="L3Cache"')
    start = xml.index(' complete_cpuset="', at)
    end = xml.index('"', start + len(' complete_cpuset="')) + 1
    out = os.path.join(OUT, "crash-l3-no-complete-cpuset.xml")
    with open(out, "w") as f:
        f.write(xml[:start] + xml[end:])
    print("wrote", out)


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    dgx_h100(True, "dgx-h100.xml", "2.12.0")
    dgx_h100(False, "dgx-h100-no-nvml.xml", "2.9.0")
    dgx_a100()
    pcie_l40s()
    t4_box()
    dgx2()
    pcie_24core()
    crash_l3()
    fuzz_seed_nvswitch()
