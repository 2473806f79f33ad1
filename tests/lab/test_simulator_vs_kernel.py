"""Keeps the unit tests' kernel simulator (tests/support/sysfs_sim.py) honest: the same
writes go to the lab's real kernel and to the simulator, and what each answers (the
errno, the links and attributes afterwards) must agree.

Two halves:
* against the recordings of the lab (tests/fixtures/lab-recording/, no lab needed): the
  simulator, started from the recorded tree with no VFs, writes sriov_numvfs and must
  produce the VF links, groups and attributes the kernel produced in the recording
  with VFs;
* against the running lab (marker ``lab``): count changes through 0 (EBUSY otherwise),
  bind/unbind/drivers_probe/driver_override on "GPU" 1 and its HDA function, and
  /proc/irq writes on the NVMe PF's IRQs, including which of them the kernel manages.
"""

import json
import os
import shutil

from support.sysfs_sim import SimulatedKernel, TreeBuilder, kernel_managed_irqs

RECORDINGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "fixtures", "lab-recording")
PF = "0000:22:00.0"
GPU1, GPU1_HDA = "0000:41:00.0", "0000:41:00.1"
PCI = "/sys/bus/pci/devices/"
VF_ATTRS = ("vendor", "device", "class", "numa_node", "local_cpulist", "driver_override")


def _copy_recording(tmp_path, name):
    source = os.path.join(RECORDINGS, name)
    assert os.path.isdir(source), "missing recording %s: run lab/record-fixtures --all" % source
    root = str(tmp_path / name)
    shutil.copytree(source, root, symlinks=True)
    return root


def _tree_view(root, address):
    """What a reader sees of one PCI function: where it sits, its links, attributes."""
    dev = os.path.join(root, PCI.lstrip("/"), address)
    real = os.path.realpath(dev)
    view = {"path": os.path.relpath(real, root),
            "physfn": os.path.basename(os.readlink(os.path.join(real, "physfn")))
            if os.path.islink(os.path.join(real, "physfn")) else None,
            "driver": os.path.basename(os.readlink(os.path.join(real, "driver")))
            if os.path.islink(os.path.join(real, "driver")) else None,
            "iommu_group": os.path.basename(os.readlink(os.path.join(real, "iommu_group")))}
    group_dir = os.path.join(root, "sys/kernel/iommu_groups", view["iommu_group"], "devices")
    view["group_members"] = sorted(os.listdir(group_dir))
    for name in VF_ATTRS:
        with open(os.path.join(real, name)) as handle:
            view[name] = handle.read().strip()
    return view


def _virtfns(root, pf):
    base = os.path.join(root, PCI.lstrip("/"), pf)
    return {name: os.path.basename(os.readlink(os.path.join(base, name)))
            for name in sorted(os.listdir(base)) if name.startswith("virtfn")}


# -- against the recordings ------------------------------------------------------------

def test_simulated_vf_creation_matches_the_recorded_kernel(tmp_path):
    sim_root = _copy_recording(tmp_path, "iommu-pt")
    real_root = os.path.join(RECORDINGS, "iommu-pt-vfs")
    # The lab's NVMe VFs stay without a driver although sriov_drivers_autoprobe is 1:
    # nvme probes them and gives up, since QEMU's secondary controllers start offline.
    sim = SimulatedKernel(sim_root, vf_drivers={PF: None})
    assert _virtfns(sim_root, PF) == {}
    sim.write(PCI + PF + "/sriov_numvfs", "2")
    assert _virtfns(sim_root, PF) == _virtfns(real_root, PF) == {
        "virtfn0": "0000:22:00.1", "virtfn1": "0000:22:00.2"}
    for vf in ("0000:22:00.1", "0000:22:00.2"):
        assert _tree_view(sim_root, vf) == _tree_view(real_root, vf)
    assert sim.read(PCI + PF + "/sriov_numvfs") == "2"
    assert sorted(os.listdir(os.path.join(sim_root, "sys/kernel/iommu_groups")), key=int) == \
        sorted(os.listdir(os.path.join(real_root, "sys/kernel/iommu_groups")), key=int)


# -- against the running lab -----------------------------------------------------------

# Runs inside the lab: each operation is a write; the answer is "ok" or the errno name,
# followed by what the kernel shows afterwards.
LAB_SCRIPT = r'''
import errno, json, os, sys
ops = json.loads(sys.stdin.read())
def observe(what):
    kind, arg = what
    if kind == "driver":
        link = "/sys/bus/pci/devices/%s/driver" % arg
        return os.path.basename(os.readlink(link)) if os.path.islink(link) else None
    if kind == "read":
        try:
            with open(arg) as h:
                return h.read().strip()
        except OSError as err:
            return "error " + errno.errorcode[err.errno]
    if kind == "exists":
        return os.path.exists(arg)
    if kind == "vfio_node":
        group = os.readlink("/sys/bus/pci/devices/%s/iommu_group" % arg)
        return os.path.exists("/dev/vfio/" + os.path.basename(group))
    if kind == "virtfns":
        base = "/sys/bus/pci/devices/%s" % arg
        return sorted(os.path.basename(os.readlink(os.path.join(base, n)))
                      for n in os.listdir(base) if n.startswith("virtfn"))
out = []
for path, value, looks in ops:
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
        answer = "ok"
    except OSError as err:
        answer = errno.errorcode[err.errno]
    out.append([answer] + [observe(w) for w in looks])
print(json.dumps(out))
'''


def _run_on_lab(lab, ops):
    proc = lab.ssh("python3 -c %s" % _shell_quote(LAB_SCRIPT), input_text=json.dumps(ops),
                   timeout=300)
    return json.loads(proc.stdout)


def _shell_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def _run_on_sim(sim, ops):
    out = []
    for path, value, looks in ops:
        try:
            sim.write(path, value)
            answer = "ok"
        except OSError as err:
            answer = __import__("errno").errorcode[err.errno]
        row = [answer]
        for kind, arg in looks:
            if kind == "driver":
                row.append(sim.driver_of(arg))
            elif kind == "read":
                value_read = sim.read(arg)
                row.append(value_read if value_read is not None else "error ENOENT")
            elif kind == "exists":
                row.append(os.path.exists(sim.path(arg)))
            elif kind == "vfio_node":
                group = os.readlink(sim.path(PCI + arg + "/iommu_group"))
                row.append(os.path.exists(sim.path("/dev/vfio/" + os.path.basename(group))))
            elif kind == "virtfns":
                row.append(sorted(_virtfns(sim.root, arg).values()))
        out.append(row)
    return out


def _compare(lab, ops, real, simulated):
    rows = []
    for op, got, want in zip(ops, simulated, real):
        if got != want:
            rows.append("%s <- %r: kernel %s, simulator %s" % (op[0], op[1], want, got))
    assert not rows, "simulator disagrees with the lab kernel (console log: %s):\n%s" % (
        lab.console_log, "\n".join(rows))


def test_sriov_count_change_goes_through_zero_as_on_the_kernel(lab, tmp_path):
    numvfs = PCI + PF + "/sriov_numvfs"
    autoprobe = PCI + PF + "/sriov_drivers_autoprobe"
    looks = [["read", numvfs], ["virtfns", PF]]
    ops = [[autoprobe, "0", looks],     # new VFs stay unbound: no nvme probe to wait for
           [numvfs, "2", looks],
           [numvfs, "3", looks],        # EBUSY: a count change must go through 0
           [numvfs, "2", looks],        # the same count again is accepted
           [numvfs, "5", looks],        # above sriov_totalvfs
           [numvfs, "0", looks],
           [numvfs, "3", looks],
           [numvfs, "0", looks],
           [autoprobe, "1", looks]]
    state = lab.ssh("cat %s %s" % (numvfs, autoprobe)).stdout.split()
    assert state == ["0", "1"], "the PF must start with 0 VFs and autoprobe 1: %s" % state
    real = _run_on_lab(lab, ops)
    sim = SimulatedKernel(_copy_recording(tmp_path, "iommu-pt"))
    _compare(lab, ops, real, _run_on_sim(sim, ops))
    assert [row[0] for row in real] == ["ok", "ok", "EBUSY", "ok", "ERANGE", "ok", "ok", "ok",
                                        "ok"], real


def test_bind_unbind_and_probe_answer_as_on_the_kernel(lab, tmp_path):
    lab.ssh("modprobe vfio-pci")
    assert lab.ssh("readlink %s%s/driver" % (PCI, GPU1_HDA)).stdout.strip().endswith(
        "/snd_hda_intel")
    override = PCI + GPU1_HDA + "/driver_override"
    # The group's number depends on how many devices the kernel met before this one, so
    # each side looks up the function's own group: the lab has grown since the recording.
    looks = [["driver", GPU1_HDA], ["read", override], ["vfio_node", GPU1_HDA]]
    ops = [[override, "vfio-pci", looks],
           [PCI + GPU1_HDA + "/driver/unbind", GPU1_HDA, looks],
           ["/sys/bus/pci/drivers_probe", GPU1_HDA, looks],        # vfio-pci takes it
           ["/sys/bus/pci/drivers_probe", GPU1_HDA, looks],        # bound: left alone
           ["/sys/bus/pci/drivers/vfio-pci/bind", GPU1_HDA, looks],   # already bound
           ["/sys/bus/pci/drivers/snd_hda_intel/bind", GPU1_HDA, looks],  # override says no
           ["/sys/bus/pci/drivers/snd_hda_intel/unbind", GPU1_HDA, looks],  # not its driver
           ["/sys/bus/pci/drivers_probe", "0000:99:00.0", looks],  # no such device
           ["/sys/bus/pci/drivers/vfio-pci/unbind", GPU1_HDA, looks],
           [override, "\n", looks],
           ["/sys/bus/pci/drivers/snd_hda_intel/bind", GPU1_HDA, looks]]
    real = _run_on_lab(lab, ops)
    root = _copy_recording(tmp_path, "iommu-pt")
    TreeBuilder(root).driver("vfio-pci")          # loaded, as modprobe made it on the lab
    sim = SimulatedKernel(root)
    _compare(lab, ops, real, _run_on_sim(sim, ops))
    assert real[2] == ["ok", "vfio-pci", "vfio-pci", True], real
    assert real[-1] == ["ok", "snd_hda_intel", "(null)", False], real


def test_irq_affinity_writes_answer_as_on_the_kernel(lab, tmp_path):
    interrupts = lab.read("/proc/interrupts")
    online = lab.read("/sys/devices/system/cpu/online").strip()
    possible = lab.read("/sys/devices/system/cpu/possible").strip()
    msi = sorted(int(n) for n in lab.listdir(PCI + PF + "/msi_irqs"))
    affinities = json.loads(lab.ssh(
        "python3 -c 'import json,sys; print(json.dumps({n: [open(\"/proc/irq/%%s/%%s\" %% (n, f))"
        ".read().strip() for f in (\"smp_affinity_list\", \"effective_affinity_list\")] "
        "for n in sys.argv[1:]}))' %s" % " ".join(str(n) for n in msi)).stdout)
    # the simulator's tree: the lab's CPUs, /proc/interrupts and the PF's IRQs
    root = str(tmp_path / "irqs")
    tree = TreeBuilder(root)
    tree.cpus(online=online, possible=possible)
    tree.write("/proc/interrupts", interrupts)
    for number, (smp, effective) in affinities.items():
        tree.write("/proc/irq/%s/smp_affinity_list" % number, smp + "\n")
        tree.write("/proc/irq/%s/effective_affinity_list" % number, effective + "\n")
    managed = kernel_managed_irqs(root)
    sim = SimulatedKernel(root, managed_irqs=managed)
    ops = []
    for number in msi:
        path = "/proc/irq/%d/smp_affinity_list" % number
        looks = [["read", path]]
        ops += [[path, "0-1", looks], [path, "9", looks], [path, "x", looks]]
    ops.append(["/proc/irq/99999/smp_affinity_list", "0", []])
    real = _run_on_lab(lab, ops)
    _compare(lab, ops, real, _run_on_sim(sim, ops))
    # the truth, spelled out: the admin queue takes the pin, the I/O queues are managed
    answers = {number: real[3 * i][0] for i, number in enumerate(msi)}
    assert [n for n, a in answers.items() if a == "EIO"] == sorted(managed), answers
    assert answers[min(msi)] == "ok", answers
    # x86 delivers to one CPU of the mask: the effective list is one CPU inside it
    for number in msi:
        if answers[number] == "ok":
            effective = lab.read("/proc/irq/%d/effective_affinity_list" % number).strip()
            assert effective in ("0", "1"), (number, effective)
